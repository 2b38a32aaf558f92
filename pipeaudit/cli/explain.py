"""`pipeaudit explain`: the cross-rank critical path of each step and what limits it."""

from __future__ import annotations

import click

from pipeaudit.cli.output import check_outputs, write_output
from pipeaudit.report import render
from pipeaudit.cli.windowopt import window_option
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
@window_option
def command(paths, fmt, step, top, width, pipeline, output, force, window, **run) -> None:
    """Critical path, slack and top causes of each step: PATHS are one run's traces (a folder
    of several profiling cycles: --window)."""
    from pipeaudit.cli.windowopt import choose, each_window, options_for, rows_json, rows_text
    from pipeaudit.errors import ConfigError

    options = load_options(run)
    check_outputs({"-o": output}, paths)
    sel = choose(paths, window)
    if window == "all":
        rows = each_window(sel, lambda p, w: _explain(p, options_for(w, options), pipeline)[1])
        write_output(rows_json(rows, "explain", " ".join(paths), lambda r: r.to_dict())
                     if fmt == "json" else rows_text(rows, _row), output)
        return
    run, result = _explain(sel.paths(sel.chosen[0]), options,
                           pipeline)
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


def _explain(paths, options, pipeline):
    """(the run of one pipeline replica, its explanation)."""
    from pipeaudit.explain import explain

    run, note = one_pipeline(load_run(paths, options), pipeline)
    require_every_rank(run, "explain", "the critical path crosses them")
    result = explain(run.timeline)
    if note:
        result.notes.insert(0, note)
    return run, result


def _row(result) -> str:
    """``2 step(s), median 386.06 ms = compute 66.2% + communication 4.9% + gaps 28.9%; top
    cause stage 3 B``: a window's line under --window all."""
    p = result.median_step
    if p is None:
        return "no step"
    d = p.to_dict()
    text = (f"{len(result.steps)} step(s), median {d['step_time_us'] / 1000:.2f} ms = compute "
            f"{100 * d['compute_share']:.1f}% + communication {100 * d['comm_share']:.1f}% + "
            f"gaps {100 * d['other_share']:.1f}%")
    if result.top_causes:
        c = result.top_causes[0].to_dict()
        text += f"; top cause stage {c['stage']} {c['kind']}"
    return text
