"""`pipeaudit whatif`: replay a measured run with changes; predict step time and bubble."""

from __future__ import annotations

import click

from pipeaudit.cli.output import check_writable, write_output


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
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown"]), default="text",
              show_default=True, help="Report format on stdout.")
@click.option("--run-schedule", default=None, metavar="NAME",
              help="The schedule the traces ran, when neither the manifest nor the order tells.")
@click.option("--run-microbatches", type=int, default=None,
              help="Microbatches per step of the traces (un-annotated traces without "
                   "ProfilerStep spans).")
@click.option("--action-pattern", default=None, metavar="REGEX",
              help="Regex with named groups kind, mb and optionally stage, for other "
                   "frameworks' spans.")
@click.option("--jobs", type=int, default=None, help="Ranks decoded in parallel (default: cores).")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Write the report to this file instead of stdout.")
@click.option("--force", is_flag=True, help="Overwrite --output if it exists.")
def command(paths, scales, comm_latency, microbatches, schedule, chunks, fmt, run_schedule,
            run_microbatches, action_pattern, jobs, output, force) -> None:
    """Predict the step time and bubble of PATHS' run with changes applied."""
    import pipeaudit
    from pipeaudit.explain import Changes, parse_scale, whatif

    check_writable(output, force=force)
    changes = Changes(scale=tuple(parse_scale(s) for s in scales), comm_latency_us=comm_latency,
                      microbatches=microbatches, schedule=schedule, chunks=chunks)
    run = pipeaudit.load(paths, schedule=run_schedule, action_pattern=action_pattern,
                         num_microbatches=run_microbatches, jobs=jobs)
    pred = whatif(run.timeline, changes, run.audit())
    if fmt == "json":
        from pipeaudit.report.json_doc import to_json

        text = to_json(pred.to_dict()) + "\n"
    elif fmt == "markdown":
        from pipeaudit.report.explain_markdown import render_whatif_markdown

        text = render_whatif_markdown(pred)
    else:
        from pipeaudit.report.explain_text import render_whatif_text

        text = render_whatif_text(pred)
    write_output(text, output, force=force)
