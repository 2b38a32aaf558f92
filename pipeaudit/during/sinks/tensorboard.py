"""Scalars to TensorBoard: an event file in the trace folder, so the scalars and the profiler
view sit under the same run. Written as the same ``simple_value`` scalars
``SummaryWriter.add_scalar`` writes, without importing torch in the audit, by either of two
writers of the same event format: tensorboard's own (the one
``torch.utils.tensorboard.SummaryWriter`` writes through), or, where tensorboard is not
installed, tensorboardX's (numpy and protobuf only: ``pip install 'pipeaudit[tensorboard]'``)."""

from __future__ import annotations

import importlib.util
import os
import time

from pipeaudit.during.scalars import tagged

WRITERS = ("tensorboard", "tensorboardX")


def available_writer() -> str | None:
    """The first of :data:`WRITERS` that is installed, or None."""
    return next((w for w in WRITERS if importlib.util.find_spec(w) is not None), None)


def log_tensorboard(logdir: str | os.PathLike, scalars: dict[str, float], step: int,
                    wall_time: float | None = None, writer: str | None = None) -> str:
    """Write ``scalars`` at ``step`` to a new event file in ``logdir``; returns its path.
    ``writer``: one of :data:`WRITERS` (default: :func:`available_writer`)."""
    writer = writer or available_writer()
    if writer == "tensorboard":
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary
    elif writer == "tensorboardX":
        from tensorboardX.proto.event_pb2 import Event
        from tensorboardX.proto.summary_pb2 import Summary
    else:
        raise ModuleNotFoundError("no TensorBoard event writer: pip install tensorboardX "
                                  "(or tensorboard)")
    values = [Summary.Value(tag=tag, simple_value=float(v))
              for tag, v in tagged(scalars).items()]
    event = Event(wall_time=wall_time or time.time(), step=int(step),
                  summary=Summary(value=values))
    os.makedirs(logdir, exist_ok=True)
    if writer == "tensorboard":
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        tb = EventFileWriter(str(logdir), filename_suffix=".pipeaudit")
        try:
            tb.add_event(event)
            tb.flush()
            return tb._file_name  # type: ignore[attr-defined]
        finally:
            tb.close()
    from tensorboardX.event_file_writer import EventsWriter

    # its names hold no pid or counter: the suffix keeps two windows' files apart
    tbx = EventsWriter(os.path.join(str(logdir), "events"),
                       filename_suffix=f".{os.getpid()}.{int(step)}.pipeaudit")
    try:
        tbx.write_event(event)
        return tbx._file_name
    finally:
        tbx.close()
