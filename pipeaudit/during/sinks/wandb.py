"""Scalars to Weights & Biases: logged to the training's active run from the training process
(a W&B run takes its data from the process that started it), when an audit has finished;
``pipeaudit/profiler_step`` is their x axis."""

from __future__ import annotations

from pipeaudit.during.scalars import tagged

STEP_KEY = "pipeaudit/profiler_step"


def active_run():
    """W&B's active run in this process, when the training imported wandb and started one."""
    import sys

    wandb = sys.modules.get("wandb")
    return getattr(wandb, "run", None) if wandb is not None else None


def log_wandb(run, scalars: dict[str, float], step: int) -> None:
    """Log ``scalars`` of the window at profiler ``step`` to ``run``."""
    run.define_metric(STEP_KEY)
    run.define_metric("pipeaudit/*", step_metric=STEP_KEY)
    run.log({STEP_KEY: int(step), **tagged(scalars)})
