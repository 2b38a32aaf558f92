"""Scalars to TensorBoard: an event file in the trace folder, so the scalars and the profiler
view sit under the same run. Written with tensorboard's own event writer (the one
``torch.utils.tensorboard.SummaryWriter`` writes through), as the same ``simple_value``
scalars ``SummaryWriter.add_scalar`` writes, without importing torch in the audit."""

from __future__ import annotations

import os
import time

from pipeaudit.during.scalars import tagged


def log_tensorboard(logdir: str | os.PathLike, scalars: dict[str, float], step: int,
                    wall_time: float | None = None) -> str:
    """Write ``scalars`` at ``step`` to a new event file in ``logdir``; returns its path."""
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    writer = EventFileWriter(str(logdir), filename_suffix=".pipeaudit")
    try:
        values = [Summary.Value(tag=tag, simple_value=float(v))
                  for tag, v in tagged(scalars).items()]
        writer.add_event(Event(wall_time=wall_time or time.time(), step=int(step),
                               summary=Summary(value=values)))
        writer.flush()
        return writer._file_name  # type: ignore[attr-defined]
    finally:
        writer.close()
