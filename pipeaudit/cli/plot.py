"""`pipeaudit plot`: static PNG/SVG plots of a run (matplotlib, the `plot` extra)."""

from __future__ import annotations

import click

from pipeaudit.cli.output import FORCE_HELP
from pipeaudit.cli.runopts import load_options, load_run, note_missing_ranks, run_options


@click.command("plot")
@click.argument("paths", nargs=-1, required=True)
@run_options
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), metavar="FILE.png|FILE.svg",
              help="Image to write; the format comes from the extension (.png or .svg).")
@click.option("--kind", type=click.Choice(["timeline", "bubble", "memory", "inflight"]),
              default="timeline", show_default=True,
              help="timeline: one step per rank with its replay ideal; bubble: measured/theory/"
                   "ideal per rank; memory: Total Allocated over time; inflight: microbatches in flight per stage.")
@click.option("--step", type=int, default=None, help="Step for --kind timeline (default: the median step).")
@click.option("--no-ideal", is_flag=True, help="Leave the replay ideal out of --kind timeline.")
@click.option("--dpi", type=click.IntRange(50, 600), default=150, show_default=True, help="PNG resolution.")
@click.option("--force", is_flag=True, help=FORCE_HELP)
def command(paths, output, kind, step, no_ideal, dpi, force, **run) -> None:
    """Plot PATHS (trace files, directories or globs of one run) as a static image for papers
    and tickets."""
    import os

    from pipeaudit.cli.output import check_outputs
    from pipeaudit.errors import ConfigError
    from pipeaudit.report.plots import FORMATS, save_plot

    if os.path.splitext(output)[1].lower() not in FORMATS:
        raise ConfigError(f"{output}: the plot format comes from the extension; use .png or .svg")
    from pipeaudit.extras import require

    require("plot", "plot")
    options = load_options(run)
    check_outputs({"-o": output}, paths)
    run = load_run(paths, options, needs_pipeline=kind != "memory")
    note_missing_ranks(run, "plot", "draws the ranks present, each bubble in its own window")
    opts = {"step": step, "ideal": not no_ideal} if kind == "timeline" else {}
    save_plot(kind, run.timeline, run.audit(), output, dpi=dpi, **opts)
    click.echo(f"wrote {output}", err=True)
