"""`pipeaudit gate`: fail CI when pipeline efficiency regresses against a baseline or a budget.

Exit codes: 0 pass (warnings included), 1 regression or budget exceeded,
2 usage or input error. ``--exit-zero`` reports without failing.
"""

from __future__ import annotations

import sys

import click

from pipeaudit.cli.output import FORCE_HELP, check_outputs, write_output
from pipeaudit.cli.runopts import load_options, load_run, run_options
from pipeaudit.cli.windowopt import window_option
from pipeaudit.report import render
from pipeaudit.report.run_facts import ranks_text

# option name -> help; every one is also a key of [tool.pipeaudit.gate]
LIMITS = {
    "max-bubble-increase": "Pipeline bubble, absolute increase (fraction of the step) [0.03].",
    "max-rank-bubble-increase": "Per-rank bubble, absolute increase [0.05].",
    "max-step-time-increase": "Step time, relative increase [0.10 = 10%].",
    "max-stage-compute-increase": "Compute per step of each stage, relative increase [0.15].",
    "max-imbalance-increase": "Max/median stage compute, absolute increase [0.15].",
    "max-exposed-comm-increase": "Exposed communication (fraction of the step), absolute increase "
                                 "[0.05].",
    "max-peak-memory-increase": "Peak memory of each rank, relative increase [0.10].",
    "max-inflight-increase": "Peak in-flight microbatches of each stage, increase [0].",
    "max-host-slowdown": ("A slowdown every stage shares with the pipeline's shape held (a "
                          "slower or busier host), relative: past it the step-time and "
                          "stage-compute checks fail [off: they warn]."),
    "noise-k": ("A change must also exceed K standard errors of the change of the medians, from "
                "the baseline's step-to-step spread (scaled MAD) [3]."),
    "max-bubble": "Budget: pipeline bubble (fraction of the step).",
    "max-bubble-over-theory": "Budget: pipeline bubble minus the schedule's theory.",
    "max-rank-bubble": "Budget: bubble of every rank.",
    "max-step-time-ms": "Budget: median step time in ms.",
    "max-imbalance": "Budget: max/median stage compute.",
    "max-exposed-comm": "Budget: exposed communication (fraction of the step).",
    "max-peak-memory-mib": "Budget: peak allocated memory of every rank in MiB.",
    "max-replica-spread": "Budget: the slowest pipeline replica's median step against the "
                          "fastest's, relative (jobs of several replicas).",
}


def _limit_options(f):
    from pipeaudit.gate.thresholds import PERCENT_OK

    for name, text in reversed(LIMITS.items()):
        key = name.replace("-", "_")
        extra = " Accepts 10% or off." if key in PERCENT_OK else \
            "" if key == "noise_k" else " Accepts off."
        f = click.option(f"--{name}", key, default=None, metavar="X", help=text + extra)(f)
    return f


@click.command("gate")
@click.argument("paths", nargs=-1, required=True)
@click.option("--baseline", "baseline_path", type=click.Path(dir_okay=False), default=None,
              help="Baseline written by `pipeaudit baseline`.")
@click.option("--allow-config-change", is_flag=True,
              help="Compare even when schedule, P, stages, M, v or world size differ.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="TOML file with the thresholds (default: [tool.pipeaudit.gate] of the nearest "
                   "pyproject.toml).")
@click.option("--no-config", is_flag=True, help="Ignore pyproject.toml; defaults and options only.")
@_limit_options
@click.option("--format", "fmt", type=click.Choice(["text", "json", "junit", "github", "markdown"]),
              default="text", show_default=True, help="Report format.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Write the report to this file instead of stdout.")
@click.option("--force", is_flag=True, help=FORCE_HELP)
@click.option("--exit-zero", is_flag=True, help="Report only: exit 0 even on a regression.")
@run_options
@window_option
@click.pass_context
def command(ctx, paths, baseline_path, allow_config_change, config_path, no_config, fmt, output,
            force, exit_zero, window, **limits) -> None:
    """Gate the run in PATHS (traces, or a baseline file of it) against --baseline and budgets.

    Checks the median over steps of: pipeline and per-rank bubble, step time,
    stage compute and imbalance, exposed communication, peak memory and
    in-flight microbatches. Exit 0 pass, 1 regression, 2 usage or input error.
    """
    from pipeaudit.cli.windowopt import audit_each, audited, choose, windows_json, \
        windows_text
    from pipeaudit.errors import ConfigError
    from pipeaudit.gate.compare import gate
    from pipeaudit.gate.snapshot import load_snapshot, read_document
    from pipeaudit.gate.thresholds import load_thresholds

    options = load_options(limits)  # what remains are the thresholds
    if no_config and config_path:
        raise ConfigError("--config and --no-config exclude each other")
    check_outputs({"-o": output}, [*paths, baseline_path, config_path])
    th, th_file = load_thresholds(limits, config=config_path, search=not no_config)
    base = read_document(baseline_path, baseline_only=True) if baseline_path else None
    if base is None and not th.budgets():
        raise ConfigError("nothing to check: give --baseline FILE or a budget (--max-bubble, "
                          "--max-step-time-ms, ...)")
    if window == "all" and fmt not in ("text", "json"):
        raise ConfigError(f"--window all: --format {fmt} reports one window; text and json "
                          "report each (or give --window LABEL)")
    sel = choose(paths, window, documents=True)
    if window == "all":
        source = " ".join(paths)
        done = audited(audit_each(sel, options, baseline=baseline_path, thresholds=th,
                                  allow_config_change=allow_config_change))
        write_output(windows_json(done, "gate", source, baseline=baseline_path) if fmt == "json"
                     else windows_text(done, source), output)
        ctx.exit(0 if exit_zero or not any(w.regressed for w in done) else 1)
    run = load_snapshot(sel.paths(sel.chosen[0]), options=options,
                        load=load_run)
    if run.audit.ranks_missing:
        click.echo(f"pipeaudit: note: ranks {ranks_text(run.audit.ranks_missing)} have no trace: "
                   "gate checks the ranks present, each bubble in its own window", err=True)
    result = gate(run, base, th, allow_config_change=allow_config_change,
                  thresholds_file=th_file)
    write_output(render("gate", result, fmt, color=sys.stdout.isatty() and output is None),
                 output)
    if fmt == "github":
        from pipeaudit.report.gate_github import append_step_summary

        append_step_summary(render("gate", result, "markdown"))
    ctx.exit(0 if exit_zero else result.exit_code)
