"""`pipeaudit watch`: audit each profiled window of a folder as it lands; with --gate, exit 1
when a window regressed against the baseline (the library: pipeaudit.during.watch)."""

from __future__ import annotations

import os

import click


@click.command("watch")
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("--gate", "baseline", type=click.Path(dir_okay=False), default=None,
              help="Baseline (`pipeaudit baseline`, or a window's audit.json) each window is "
                   "held to, with the gate's thresholds ([tool.pipeaudit.gate]).")
@click.option("--once", is_flag=True, help="Audit the windows there now and stop.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="text: a line per window as it lands and the series at "
                                      "the end; json: one document at the end.")
@click.option("--interval", "poll_s", type=click.FloatRange(min=0.05), default=2.0,
              show_default=True, help="Seconds between looks at the folder.")
@click.option("--settle", "settle_s", type=click.FloatRange(min=0), default=2.0,
              show_default=True, help="A file is complete once unchanged this many seconds.")
@click.option("--rank-timeout", "rank_timeout_s", type=click.FloatRange(min=0), default=120.0,
              show_default=True, help="Audit a window short of ranks after this many seconds.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0), default=None,
              help="Stop after this many seconds.")
@click.option("--max-windows", type=click.IntRange(min=1), default=None,
              help="Stop after this many windows.")
@click.pass_context
def command(ctx, directory, baseline, once, fmt, poll_s, settle_s, rank_timeout_s, timeout_s,
            max_windows) -> None:
    """Audit every profiled window in DIRECTORY as it lands (torch's tensorboard_trace_handler,
    pipeaudit.profiler.trace_handler, torchtitan's iteration_N/ folders, any folder of traces).

    Exit 0, or 1 when --gate found a regression in a window, 2 on a usage or input error or
    when no window was found.
    """
    from pipeaudit.cli.windowopt import windows_json, windows_summary
    from pipeaudit.during.lines import window_line
    from pipeaudit.during.watch import watch
    from pipeaudit.errors import ConfigError

    if not os.path.isdir(directory):
        raise ConfigError(f"{directory}: no such directory")
    thresholds = None
    if baseline is not None:
        from pipeaudit.gate import load_thresholds, read_document

        read_document(baseline, baseline_only=True)  # a bad baseline: exit 2 before watching
        thresholds, _ = load_thresholds(None)
    done = []
    for w in watch(directory, baseline=baseline, thresholds=thresholds, once=once, poll_s=poll_s,
                   settle_s=settle_s, rank_timeout_s=rank_timeout_s, timeout_s=timeout_s,
                   max_windows=max_windows):
        done.append(w)
        if fmt == "text":
            click.echo(window_line(w))
    if not done:  # as analyze says of a folder without traces
        raise ConfigError(f"{directory}: no profiled window found (no trace files in this folder "
                          "or below)")
    click.echo(windows_json(done, "watch", directory, baseline=baseline) if fmt == "json"
               else windows_summary(done, directory), nl=False)
    ctx.exit(1 if any(w.regressed for w in done) else 0)
