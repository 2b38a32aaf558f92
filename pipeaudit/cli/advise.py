"""`pipeaudit advise`: the fastest schedule, chunks and M that fit in memory, from a run."""

from __future__ import annotations

import click

from pipeaudit.cli.output import check_outputs, write_output
from pipeaudit.cli.runopts import (
    WHATIF_FLAGS,
    load_options,
    load_run,
    one_pipeline,
    replica_report_options,
    require_every_rank,
)
from pipeaudit.report import render


def _ints(text: str | None, flag: str) -> list[int] | None:
    if not text:
        return None
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"{text!r} is not comma-separated integers", param_hint=flag) from None
    if not values or min(values) < 1:
        raise click.BadParameter(f"{text!r}: integers >= 1 please", param_hint=flag)
    return values


class VerifyCount(click.ParamType):
    """``--verify``: a count K, or ``auto`` (until no candidate left is predicted within the
    order band of the fastest measured)."""

    name = "K|auto"

    def convert(self, value, param, ctx):
        if isinstance(value, int) or value == "auto":
            return value
        try:
            k = int(value)
        except ValueError:
            self.fail(f"{value!r} is neither a count nor 'auto'", param, ctx)
        if k < 0:
            self.fail(f"{value!r}: a count >= 0 please", param, ctx)
        return k


@click.command("advise")
@click.argument("paths", nargs=-1, required=True)
@click.option("--memory-cap", default=None, metavar="SIZE",
              help="Largest peak memory per rank a candidate may need (e.g. 40G, 512MiB).")
@click.option("--schedules", default=None, metavar="LIST",
              help="Schedules to consider, comma-separated. [default: every schedule torch "
                   "runs; a DeepSpeed run: 1f1b; a Megatron-core run: 1f1b, interleaved-1f1b]")
@click.option("--microbatches", "microbatches_list", default=None, metavar="LIST",
              help="Microbatch counts to consider, comma-separated. [default: P/2 .. 4P and the run's]")
@click.option("--global-batch", type=click.IntRange(1), default=None, metavar="N",
              help="Samples per step: only M that divide it. [default: the manifest's batch size]")
@click.option("--stage-layers", "stage_layers", default=None, metavar="N,N,...",
              help="Layers of each of the run's stages in stage order, e.g. 9,8,8,7 (how the "
                   "run was cut). [default: the manifest's stage_layers]; known, every "
                   "contiguous split of the layers is searched too.")
@click.option("--no-split-search", "no_split_search", is_flag=True,
              help="Keep the layers per stage (the run's, or as even as possible for other "
                   "stages): do not search where to cut the model.")
@click.option("--top", type=click.IntRange(1), default=10, show_default=True,
              help="Candidates shown (text/markdown; json lists all).")
@click.option("--verify", "verify_top", type=VerifyCount(), default=0, metavar="K|auto",
              help="Rerun the measured configuration and K candidates with the harness (runs "
                   "made by `pipeaudit profile` only), best-predicted first, each prediction "
                   "corrected by the reruns before it; report predicted against measured and "
                   "advise the fastest rerun that fits; auto: until no candidate left is "
                   "predicted within the order band of the fastest measured.")
@click.option("--repeat", "repeats", type=click.IntRange(1), default=1, show_default=True,
              metavar="R",
              help="With --verify: run each configuration R times; the run of median step time "
                   "stands for it (steadier on a noisy machine).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Where --verify writes its reruns (one folder each).")
@click.option("--check", is_flag=True,
              help="PATHS are BEFORE AFTER: hold a rerun made by hand (AFTER) to the prediction "
                   "advise makes from BEFORE.")
@replica_report_options("advise on", flags=WHATIF_FLAGS)
def command(paths, memory_cap, schedules, microbatches_list, global_batch, stage_layers,
            no_split_search, top, verify_top, repeats, out_dir, check, fmt, pipeline, output,
            force, **run) -> None:
    """Rank the schedules, chunks and microbatch counts to run instead of PATHS' run."""
    from pipeaudit.advise import advise
    from pipeaudit.advise.verify import check as check_rerun
    from pipeaudit.advise.verify import verify
    from pipeaudit.errors import ConfigError
    from pipeaudit.trace.options import parse_size

    options = load_options(run, flags=WHATIF_FLAGS)
    check_outputs({"-o": output}, paths)
    cap = parse_size(memory_cap) if memory_cap is not None else None
    if verify_top and not out_dir:
        raise click.UsageError("--verify needs --out DIR for the reruns")
    if verify_top:
        from pipeaudit.extras import require

        require("harness", "advise --verify")  # its reruns are `pipeaudit profile` runs
    if repeats > 1 and not verify_top:
        raise click.UsageError("--repeat repeats the reruns of --verify: give --verify K")
    if check and len(paths) != 2:
        raise click.UsageError("--check takes two runs: BEFORE AFTER")
    before_paths = [paths[0]] if check else list(paths)
    base, note = one_pipeline(load_run(before_paths, options, flags=WHATIF_FLAGS), pipeline)
    require_every_rank(base, "advise", "the replay runs every rank's order")
    if base.audit().schedule is None:
        from pipeaudit.audit.found import describe_paths

        raise ConfigError(f"{describe_paths(before_paths)}: the run's schedule was not recognised: "
                          "advise predicts from a run whose schedule it knows; declare the one "
                          "that ran with --run-schedule NAME")
    advice = advise(base, memory_cap=cap, schedules=schedules.split(",") if schedules else None,
                    microbatches=_ints(microbatches_list, "--microbatches"),
                    global_batch=global_batch,
                    stage_layers=_ints(stage_layers, "--stage-layers"),
                    search_splits=not no_split_search)
    if note:
        advice.notes.insert(0, note)
    if check:
        import pipeaudit

        row = check_rerun(advice, pipeaudit.load(paths[1]))
        advice.verified = [row]
    if verify_top:
        if base.timeline.manifest is None:
            raise ConfigError(f"{paths[0]}: --verify reruns runs made by `pipeaudit profile` "
                              "(no manifest.json here)")
        verify(advice, base.timeline.manifest, out_dir,
               None if verify_top == "auto" else verify_top,
               on_start=lambda name: click.echo(f"rerunning {name} ...", err=True),
               repeats=repeats)
    write_output(render("advise", advice, fmt, top=top), output)
