"""Scalars to TensorBoard: an event file in the trace folder, so the scalars and the profiler
view sit under the same run (``torch.utils.tensorboard.SummaryWriter``)."""

from __future__ import annotations

import os

from pipeaudit.during.scalars import tagged


def log_tensorboard(logdir: str | os.PathLike, scalars: dict[str, float], step: int,
                    wall_time: float | None = None) -> str:
    """Write ``scalars`` at ``step`` to a new event file in ``logdir``; returns its path."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=str(logdir), filename_suffix=".pipeaudit")
    try:
        for tag, value in tagged(scalars).items():
            writer.add_scalar(tag, value, global_step=step, walltime=wall_time)
        writer.flush()
        return writer.file_writer.event_writer._file_name  # type: ignore[union-attr]
    finally:
        writer.close()
