"""`pipeaudit export`: write a run as a Perfetto / Chrome trace with pipeline tracks."""

from __future__ import annotations

import click

from pipeaudit.cli.output import FORCE_HELP
from pipeaudit.cli.runopts import load_options, load_run, note_missing_ranks, run_options


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
def command(paths, out, with_ideal, merge_original, force, **run) -> None:
    """Export PATHS (trace files, directories or globs of one run) as a Chrome trace for
    ui.perfetto.dev: one process per rank, one track per stage, bubble and replay-ideal
    tracks, send->recv flow arrows, memory and in-flight counters."""
    from pipeaudit.cli.output import check_outputs
    from pipeaudit.report.perfetto import write_perfetto

    options = load_options(run)
    check_outputs({"--perfetto": out}, paths)
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
    click.echo(f"wrote {out}: {', '.join(parts)}; open it in ui.perfetto.dev", err=True)
    for note in s.notes:
        click.echo(f"note: {note}", err=True)
