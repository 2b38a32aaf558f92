"""`pipeaudit whatif`: replay a measured run with changes; predict step time and bubble."""

from __future__ import annotations

import click

from pipeaudit.cli.output import check_outputs, write_output
from pipeaudit.report import render
from pipeaudit.cli.runopts import (
    WHATIF_FLAGS,
    load_options,
    load_run,
    one_pipeline,
    replica_report_options,
    require_every_rank,
)


@click.command("whatif")
@click.argument("paths", nargs=-1, required=True)
@click.option("--scale", "scales", multiple=True, metavar="STAGE[:KIND]=FACTOR",
              help="Stage STAGE (only its KIND actions: F, B, I or W) takes FACTOR times as long, "
                   "e.g. 2=0.5 or 1:B=0.8. Repeatable.")
@click.option("--comm-latency", type=float, default=None, metavar="US",
              help="Every cross-rank delay takes US microseconds (replaces the measured ones).")
@click.option("--microbatches", type=click.IntRange(1), default=None, metavar="M",
              help="Replay with M microbatches of the same global batch (compute per "
                   "microbatch scales by M_old/M).")
@click.option("--schedule", default=None, metavar="NAME",
              help="Replay the catalogue order of another schedule (see `pipeaudit simulate`).")
@click.option("--chunks", "-v", type=click.IntRange(1), default=None,
              help="Stages per rank of the replayed schedule.")
@replica_report_options("replay", flags=WHATIF_FLAGS)
def command(paths, scales, comm_latency, microbatches, schedule, chunks, fmt, pipeline, output,
            force, **run) -> None:
    """Predict the step time and bubble of PATHS' run with changes applied."""
    from pipeaudit.explain import Changes, parse_scale, whatif

    options = load_options(run, flags=WHATIF_FLAGS)
    check_outputs({"-o": output}, paths)
    changes = Changes(scale=tuple(parse_scale(s) for s in scales), comm_latency_us=comm_latency,
                      microbatches=microbatches, schedule=schedule, chunks=chunks)
    run, note = one_pipeline(load_run(paths, options, flags=WHATIF_FLAGS), pipeline)
    require_every_rank(run, "whatif", "the replay runs every rank's order")
    pred = whatif(run.timeline, changes, run.audit())
    if note:
        pred.notes.insert(0, note)
    write_output(render("whatif", pred, fmt), output)
