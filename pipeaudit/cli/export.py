"""`pipeaudit export`: write a run as a Perfetto / Chrome trace with pipeline tracks."""

from __future__ import annotations

import click

from pipeaudit.cli.output import FORCE_HELP
from pipeaudit.cli.runopts import load_options, load_run, note_missing_ranks, run_options
from pipeaudit.cli.windowopt import window_option
from pipeaudit.report.fit import hanging


@click.command("export")
@click.argument("paths", nargs=-1, required=True)
@run_options
@click.option("--perfetto", "out", required=True, type=click.Path(dir_okay=False), metavar="OUT.json[.gz]",
              help="Chrome-trace JSON file to write (gzip-compressed when it ends in .gz).")
@click.option("--with-ideal", is_flag=True,
              help="Add the replay ideal (observed order, measured compute, free communication) "
                   "under each stage, aligned at each step's start.")
@click.option("--merge-original", is_flag=True,
              help="Also merge every rank's original trace events into the file (pids remapped per rank).")
@click.option("--force", is_flag=True, help=FORCE_HELP)
@window_option
def command(paths, out, with_ideal, merge_original, force, window, **run) -> None:
    """Export PATHS (trace files, directories or globs of one run) as a Chrome trace for
    ui.perfetto.dev: one process per rank, one track per stage, bubble and replay-ideal
    tracks, send->recv flow arrows, memory and in-flight counters. With --window all, a file
    per window: OUT with the window's label before its suffix."""
    from pipeaudit.cli.output import check_outputs
    from pipeaudit.cli.windowopt import choose, each_window, options_for, rows_text

    options = load_options(run)
    check_outputs({"--perfetto": out}, paths)
    sel = choose(paths, window)
    if window == "all":
        outs = {w.key: _labelled(out, w.label) for w in sel.chosen}
        check_outputs({f"--perfetto ({w.label})": outs[w.key] for w in sel.chosen}, paths)
        rows = each_window(sel, lambda p, w: (outs[w.key], _export(
            p, options_for(w, options), outs[w.key], with_ideal, merge_original)))
        click.echo(rows_text(rows, lambda r: f"wrote {r[0]}: {r[1]}"), nl=False)
        return
    click.echo(hanging(_export(sel.paths(sel.chosen[0]), options, out,
                               with_ideal, merge_original, out_text=out)), err=True)


def _labelled(out: str, label: str) -> str:
    """``trace.json.gz`` -> ``trace.step_4.json.gz``: a window's file under --window all."""
    import re

    slug = re.sub(r"[^A-Za-z0-9]+", "_", label).strip("_") or "window"
    head, sep, tail = out.partition(".json")
    return f"{head}.{slug}{sep}{tail}" if sep else f"{out}.{slug}"


def _export(paths, options, out: str, with_ideal: bool, merge_original: bool,
            out_text: str | None = None) -> str:
    """Write one window's Chrome trace; what it holds, in words (notes on stderr)."""
    from pipeaudit.report.perfetto import write_perfetto

    run = load_run(paths, options)
    note_missing_ranks(run, "export", "writes the ranks present; their bubble tracks lie in the "
                                      "window of the ranks present")
    s = write_perfetto(run.timeline, out, with_ideal=with_ideal, merge_original=merge_original)
    parts = [f"{s.ranks} ranks", f"{s.slices} actions", f"{s.wait_slices} waits inside them",
             f"{s.flows} flows",
             f"{s.bubble_slices} bubble intervals", f"{s.counter_events} counter samples"]
    if with_ideal:
        parts.append(f"{s.ideal_slices} ideal actions")
    if merge_original:
        parts.append(f"{s.original_events} original events")
    for note in s.notes:
        click.echo(hanging(f"note: {note}"), err=True)
    what = ", ".join(parts)
    return f"wrote {out_text}: {what}; open it in ui.perfetto.dev" if out_text else what
