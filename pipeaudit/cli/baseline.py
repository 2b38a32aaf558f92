"""`pipeaudit baseline`: store a run's audit, configuration and per-step series for `gate`."""

from __future__ import annotations

import click

from pipeaudit.cli.output import FORCE_HELP, check_outputs, write_output
from pipeaudit.cli.runopts import load_options, load_run, run_options


@click.command("baseline")
@click.argument("paths", nargs=-1, required=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Write the baseline to this file (default: stdout).")
@click.option("--force", is_flag=True, help=FORCE_HELP)
@run_options
def command(paths, output, force, **run) -> None:
    """Store the audit of the run in PATHS (trace files, directories or globs) as a baseline.

    The baseline holds the `analyze --format json` document, the run's
    configuration (schedule, P, stages, M, v, world size) and the per-step
    values `gate` needs to tell a regression from noise.
    """
    from pipeaudit.gate.snapshot import baseline_json, load_snapshot

    check_outputs({"-o": output}, paths)
    snap = load_snapshot(paths, options=load_options(run), load=load_run)
    write_output(baseline_json(snap), output)
    s = snap.series
    n = len(s.steps) if s else 0
    if output:
        click.echo(f"pipeaudit: wrote baseline {output}: {snap.config.describe()}, {n} step(s)",
                   err=True)
    if n < 3:
        click.echo(f"pipeaudit: warning: the run has {n} step(s); with 3 or more (profile "
                   "--steps 5) one slow step cannot fail the gate", err=True)
