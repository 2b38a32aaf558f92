"""`pipeaudit diff`: compare two runs stage by stage."""

from __future__ import annotations

import click

from pipeaudit.cli.output import FORCE_HELP, check_outputs, write_output
from pipeaudit.cli.runopts import load_options, load_run, run_options
from pipeaudit.cli.windowopt import window_option
from pipeaudit.report import render


@click.command("diff")
@click.argument("run_a")
@click.argument("run_b")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown"]), default="text",
              show_default=True, help="Report format.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Write the report to this file instead of stdout.")
@click.option("--force", is_flag=True, help=FORCE_HELP)
@run_options
@window_option
def command(run_a, run_b, fmt, output, force, window, **run) -> None:
    """Compare RUN_A (before) with RUN_B (after), stage by stage.

    Each RUN is a trace directory, file or quoted glob, a saved
    `analyze --format json` document, or a baseline file. --window picks the
    window of each; with --window all, each window of RUN_B is compared with
    RUN_A's window of the same label, else RUN_A's latest.
    """
    from pipeaudit.cli.windowopt import choose, each_window, options_for, rows_json, rows_text
    from pipeaudit.gate.diff import diff_runs
    from pipeaudit.gate.snapshot import load_snapshot
    from pipeaudit.trace.window_select import canonical

    check_outputs({"-o": output}, [run_a, run_b])
    options = load_options(run)

    def load(sel, w, each=False):  # each window of --window all is read as watch reads it
        return load_snapshot(sel.paths(w), allow_analyze=True,
                             options=options_for(w, options) if each else options, load=load_run)

    sel_a = choose([run_a], "latest" if window == "all" else window, documents=True)
    sel_b = choose([run_b], window, documents=True)
    a = load(sel_a, sel_a.chosen[0])
    if window != "all":
        write_output(render("diff", diff_runs(a, load(sel_b, sel_b.chosen[0])), fmt), output)
        return
    by_label = {canonical(w.label): w for w in sel_a.windows}

    def compare(_paths, w):
        same = by_label.get(canonical(w.label)) if len(sel_a.windows) > 1 else None
        return (same or sel_a.chosen[0]).label, diff_runs(load(sel_a, same, True) if same else a,
                                                          load(sel_b, w, True))

    rows = each_window(sel_b, compare)
    write_output(rows_json(rows, "diff", run_b, lambda r: {"a": r[0], **r[1].to_dict()})
                 if fmt == "json" else rows_text(rows, _row), output)


def _row(pair) -> str:
    """``against LABEL: <what changed most, first part>``: a window's line under --window all."""
    label, d = pair
    return f"against {label}: {d.summary().split('; ')[0].rstrip('.')}"
