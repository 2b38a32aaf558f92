"""`pipeaudit analyze`: audit a run's traces.

Nothing heavy is imported before the first rank's file is being read
(:func:`pipeaudit.prestart.start_early`: polars, the analysis and the reporters load while a
thread reads it); ``PIPEAUDIT_TIMINGS``' start phase is the time until then.
"""

from __future__ import annotations

import sys

import click

from pipeaudit.cli.output import FORCE_HELP, write_output
from pipeaudit.cli.runopts import load_options, load_run, run_options
from pipeaudit.cli.windowopt import window_option


@click.command("analyze")
@click.argument("paths", nargs=-1, required=True)
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown"]), default="text",
              show_default=True, help="Report format on stdout.")
@run_options
@window_option
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Write the report to this file instead of stdout.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False), default=None,
              help="Also write a self-contained HTML report (charts, no network needed) to this file.")
@click.option("--force", is_flag=True, help=FORCE_HELP)
@click.option("-v", "--verbose", is_flag=True,
              help="Text report: add the theory and published-formula notes, the per-stage and "
                   "per-rank tables, every finding and the notes (the default fits a screen).")
@click.option("--with-hta", is_flag=True,
              help="Also run Holistic Trace Analysis (pipeaudit[hta]) on GPU traces and show its "
                   "idle and comm/comp overlap next to pipeaudit's per-rank figures.")
def command(paths, fmt, window, output, html_path, force, verbose, with_hta, **run) -> None:
    """Audit pipeline traces: PATHS are trace files, directories or globs of one run (a
    folder of several profiling cycles: --window)."""
    from pipeaudit import timings
    from pipeaudit.prestart import start_early

    from pipeaudit.cli.output import check_outputs
    from pipeaudit.cli.windowopt import (audit_each, audited, choose, refuse_all,
                                         windows_json, windows_text)

    options = load_options(run)
    if with_hta:
        from pipeaudit.extras import require

        require("hta", "analyze --with-hta")
    check_outputs({"-o": output, "--html": html_path}, paths)  # before the (long) analysis
    if html_path or with_hta:
        refuse_all(window, "--html and --with-hta report on one window")
    sel = choose(paths, window)
    if window == "all":
        done = audited(audit_each(sel, options))
        source = " ".join(paths)
        write_output(windows_json(done, "analyze", source, full="audit") if fmt == "json"
                     else windows_text(done, source), output)
        return
    paths = sel.paths(sel.chosen[0])
    # the worker pool's imports and the read of the first rank overlap ours
    start_early(paths, options.jobs, options.executor, options.max_memory, options.salvage)
    run = load_run(paths, options, needs_pipeline=False)  # per-rank figures stand without one
    result = run.audit()
    timings.mark("audit")
    from pipeaudit.report import render

    if html_path:
        from pipeaudit.report.html import write_html

        write_html(run.timeline, result, html_path, advice=_advice(run, result))
        click.echo(f"wrote {html_path}", err=True)
    hta = None
    if with_hta:
        from pipeaudit.integrations.hta import compare_with_hta

        hta = compare_with_hta(run)
    if fmt == "json":
        doc = result.to_dict()
        if hta is not None:
            doc["hta"] = hta.to_dict()
        text = render("analyze", doc, "json")
    else:
        from pipeaudit.report.step_view import step_timeline_text

        step, tl_text = step_timeline_text(run.timeline, result) if result.pipeline_found else (None, "")
        text = render("analyze", result, fmt, timeline_text=tl_text, timeline_step=step,
                      color=sys.stdout.isatty() and output is None, verbose=verbose)
        if hta is not None:
            from pipeaudit.report.markdown import md_fence

            table = render("hta", hta, "text")
            text += ("\n## HTA alongside\n\n" + "\n".join(md_fence(table.rstrip("\n"))) + "\n"
                     if fmt == "markdown" else "\n" + table)
    write_output(text, output)
    timings.mark("report")
    timings.report()


def _advice(run, result):
    """The run's advice for the HTML report, when it can be made (one pipeline, every rank,
    a known schedule); None otherwise."""
    from pipeaudit.errors import PipeauditError

    if (not result.pipeline_found or result.schedule is None or result.ranks_missing
            or len(result.pipelines) > 1):
        return None
    from pipeaudit.advise import advise

    try:
        return advise(run)
    except PipeauditError:
        return None
