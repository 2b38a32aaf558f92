"""`pipeaudit explain`: the cross-rank critical path of each step and what limits it."""

from __future__ import annotations

import click

from pipeaudit.cli.output import check_outputs, write_output
from pipeaudit.report import render
from pipeaudit.cli.runopts import (
    load_options,
    load_run,
    one_pipeline,
    replica_report_options,
    require_every_rank,
)


@click.command("explain")
@click.argument("paths", nargs=-1, required=True)
@click.option("--step", type=int, default=None,
              help="Step to show in detail (text/markdown). [default: the median step]")
@click.option("--top", type=click.IntRange(1), default=5, show_default=True,
              help="Causes listed (text/markdown; json lists all).")
@click.option("--width", type=click.IntRange(20), default=96, show_default=True,
              help="Timeline width in characters.")
@replica_report_options("explain")
def command(paths, fmt, step, top, width, pipeline, output, force, **run) -> None:
    """Critical path, slack and top causes of each step: PATHS are one run's traces."""
    from pipeaudit.errors import ConfigError
    from pipeaudit.explain import explain

    options = load_options(run)
    check_outputs({"-o": output}, paths)
    run, note = one_pipeline(load_run(paths, options), pipeline)
    require_every_rank(run, "explain", "the critical path crosses them")
    result = explain(run.timeline)
    if note:
        result.notes.insert(0, note)
    if fmt == "json":
        write_output(render("explain", result, "json"), output)
        return
    shown = result.median_step
    if step is not None:
        shown = next((p for p in result.steps if p.step == step), None)
        if shown is None:
            raise ConfigError(f"--step {step}: the run's steps are "
                              f"{', '.join(str(p.step) for p in result.steps)}")
    from pipeaudit.report.critical_timeline import LEGEND, critical_timeline
    from pipeaudit.report.step_view import legend

    tl_text = "\n".join([legend(run.timeline, waits=True),
                         critical_timeline(run.timeline, shown, width=width),
                         LEGEND]) if shown else ""
    write_output(render("explain", result, fmt, step=shown, timeline_text=tl_text, top=top),
                 output)
