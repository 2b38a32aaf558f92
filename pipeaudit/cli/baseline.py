"""`pipeaudit baseline`: store a run's audit, configuration and per-step series for `gate`."""

from __future__ import annotations

import click

from pipeaudit.cli.output import FORCE_HELP, check_outputs, write_output
from pipeaudit.cli.runopts import load_options, load_run, run_options
from pipeaudit.cli.windowopt import window_option


@click.command("baseline")
@click.argument("paths", nargs=-1, required=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Write the baseline to this file (default: stdout).")
@click.option("--force", is_flag=True, help=FORCE_HELP)
@run_options
@window_option
def command(paths, output, force, window, **run) -> None:
    """Store the audit of the run in PATHS (trace files, directories or globs) as a baseline.

    The baseline holds the `analyze --format json` document, the run's
    configuration (schedule, P, stages, M, v, world size) and the per-step
    values `gate` needs to tell a regression from noise. With --window all,
    one document holds each window's baseline under windows[i].baseline.
    """
    from pipeaudit.cli.windowopt import (audit_each, audited, choose, windows_json,
                                         windows_text)
    from pipeaudit.gate.snapshot import baseline_json, load_snapshot

    check_outputs({"-o": output}, paths)
    options = load_options(run)
    sel = choose(paths, window, documents=True)
    if window == "all":
        source = " ".join(paths)
        done = audited(audit_each(sel, options))
        write_output(windows_json(done, "baseline", source, full="baseline"), output)
        click.echo(windows_text(done, source), err=True, nl=False)
        return
    snap = load_snapshot(sel.paths(sel.chosen[0]), options=options,
                         load=load_run)
    write_output(baseline_json(snap), output)
    s = snap.series
    n = len(s.steps) if s else 0
    if output:
        click.echo(f"pipeaudit: wrote baseline {output}: {snap.config.describe()}, {n} step(s)",
                   err=True)
    if n < 3:
        click.echo(f"pipeaudit: warning: the run has {n} step(s); with 3 or more (profile "
                   "--steps 5) one slow step cannot fail the gate", err=True)
