"""`pipeaudit diff`: compare two runs stage by stage."""

from __future__ import annotations

import click

from pipeaudit.cli.output import FORCE_HELP, check_outputs, write_output
from pipeaudit.cli.runopts import load_options, load_run, run_options
from pipeaudit.report import render


@click.command("diff")
@click.argument("run_a")
@click.argument("run_b")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown"]), default="text",
              show_default=True, help="Report format.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Write the report to this file instead of stdout.")
@click.option("--force", is_flag=True, help=FORCE_HELP)
@run_options
def command(run_a, run_b, fmt, output, force, **run) -> None:
    """Compare RUN_A (before) with RUN_B (after), stage by stage.

    Each RUN is a trace directory, file or quoted glob, a saved
    `analyze --format json` document, or a baseline file.
    """
    from pipeaudit.gate.diff import diff_runs
    from pipeaudit.gate.snapshot import load_snapshot

    check_outputs({"-o": output}, [run_a, run_b])
    options = load_options(run)
    a = load_snapshot([run_a], allow_analyze=True, options=options, load=load_run)
    b = load_snapshot([run_b], allow_analyze=True, options=options, load=load_run)
    d = diff_runs(a, b)
    write_output(render("diff", d, fmt), output)
