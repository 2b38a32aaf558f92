"""``pipeaudit sweep``: a thin shell over :mod:`pipeaudit.sweep`."""

from __future__ import annotations

import sys

import click

from pipeaudit.errors import ConfigError


@click.command("sweep")
@click.option("--schedules", default="naive,gpipe,1f1b", show_default=True, metavar="A,B,...",
              help="Schedules to run (harness names, comma-separated).")
@click.option("--ranks", "-P", "stages", default=None, metavar="P1,P2,...",
              help="Pipeline ranks P to run (stage positions of one pipeline). [default: 2]")
@click.option("--stages", "stages_alias", default=None, hidden=True, help="Old spelling of --ranks.")
@click.option("--microbatches", "-M", default="1,2,4,8", show_default=True, metavar="M1,M2,...",
              help="Microbatches per step M.")
@click.option("--chunks", "-v", default=None, metavar="V1,V2,...",
              help="Stages per rank v for schedules where it is free (interleaved-1f1b, "
                   "looped-bfs, interleaved-zb). [default: 2]")
@click.option("--steps", type=int, default=2, show_default=True, help="Profiled steps per run.")
@click.option("--warmup-steps", type=int, default=1, show_default=True,
              help="Training steps before the profiler starts.")
@click.option("--layers", type=int, default=8, show_default=True, help="Model blocks in total.")
@click.option("--hidden", type=int, default=256, show_default=True, help="Model width.")
@click.option("--ffn-mult", type=int, default=4, show_default=True, help="MLP expansion.")
@click.option("--batch-size", type=int, default=None,
              help="Global batch for every run (must divide by each M). [default: 4 x M]")
@click.option("--seq-len", type=int, default=64, show_default=True, help="Sequence length.")
@click.option("--threads", type=int, default=1, show_default=True, help="Intra-op threads per rank.")
@click.option("--seed", type=int, default=0, show_default=True, help="Weights and data seed.")
@click.option("--backend", default="auto", show_default=True, metavar="auto|gloo|nccl",
              help="Process-group backend of every run.")
@click.option("--timeout", type=float, default=600.0, show_default=True,
              help="Seconds per run; a hung run is killed and recorded as failed.")
@click.option("--no-profile-memory", is_flag=True,
              help="Do not record memory (no peak memory column; slightly faster runs).")
@click.option("--out", "-o", type=click.Path(file_okay=False), default=None,
              help="Sweep directory: sweep.json, sweep.csv, plots, runs/<run>/ traces.")
@click.option("--resume", is_flag=True,
              help="Continue the sweep in --out: keep runs already ok, redo the rest.")
@click.option("--force", is_flag=True, help="Write into a non-empty --out.")
@click.option("--report", "report_dir", type=click.Path(file_okay=False), default=None,
              help="Render the table and plots again from a finished sweep directory (no runs).")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "csv"]), default="text",
              show_default=True, help="Result on stdout.")
@click.option("--no-plots", is_flag=True, help="Do not write the PNG plots.")
def command(schedules, stages, stages_alias, microbatches, chunks, steps, warmup_steps, layers, hidden, ffn_mult,
            batch_size, seq_len, threads, seed, backend, timeout, no_profile_memory, out, resume,
            force, report_dir, fmt, no_plots) -> None:
    """Profile and audit every valid combination of schedules x P x M (x v).

    Each run's traces go to OUT/runs/<schedule>_p<P>_m<M>[_v<v>]/; invalid
    combinations are listed as skipped with the harness's reason; a run that
    fails is recorded as failed and the sweep goes on. Results: OUT/sweep.json,
    OUT/sweep.csv and PNG plots of bubble (measured, theory, replay ideal), step
    time, throughput, peak memory and in-flight microbatches vs M.
    """
    from pipeaudit import sweep as sw

    if report_dir is not None:
        if out is not None or resume:
            raise ConfigError("--report reads a finished sweep: do not combine it with --out or --resume")
        result = sw.load(report_dir)
        _plots(result, report_dir, no_plots)
        _emit(result, fmt)
        return
    if out is None:
        raise ConfigError("--out DIR is required (or --report DIR to show a finished sweep)")
    if resume and force:
        raise ConfigError("--resume and --force do not go together: --resume keeps finished runs")
    from pipeaudit.extras import require

    require("harness", "sweep")  # its runs are `pipeaudit profile` runs
    from pipeaudit.harness.config import ModelConfig
    from pipeaudit.sweep.grid import parse_int_list, parse_schedules
    from pipeaudit.sweep.progress import SweepProgress

    cfg = sw.SweepConfig(
        out=out, schedules=tuple(parse_schedules(schedules)),
        stages=tuple(parse_int_list(stages or stages_alias or "2", "--ranks")),
        microbatches=tuple(parse_int_list(microbatches, "--microbatches")),
        chunks=tuple(parse_int_list(chunks, "--chunks")) if chunks else None,
        steps=steps, warmup_steps=warmup_steps,
        model=ModelConfig(layers=layers, hidden=hidden, ffn_mult=ffn_mult, batch_size=batch_size,
                          seq_len=seq_len),
        backend=backend, timeout=timeout, threads=threads, seed=seed,
        profile_memory=not no_profile_memory, resume=resume, force=force,
    )
    result = sw.run_sweep(cfg, SweepProgress())
    _plots(result, out, no_plots)
    _emit(result, fmt)


def _plots(result, out_dir: str, no_plots: bool) -> None:
    if no_plots:
        return
    from pipeaudit.report.sweep_plots import matplotlib_available, plot_sweep

    if not matplotlib_available():
        click.echo("pipeaudit: note: matplotlib is not installed: no plots "
                   "(pip install 'pipeaudit[plot]')", err=True)
        return
    paths = plot_sweep(result, out_dir)
    if paths:
        click.echo(f"plots: {', '.join(str(p) for p in paths)}", err=True)


def _emit(result, fmt: str) -> None:
    from pipeaudit.report import render

    click.echo(render("sweep", result, fmt, color=sys.stdout.isatty()), nl=False)
