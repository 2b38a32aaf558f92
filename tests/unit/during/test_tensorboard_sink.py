"""The TensorBoard sink writes the same event file with tensorboard's writer or with
tensorboardX's (the light one the ``tensorboard`` extra installs): TensorBoard reads both."""

from __future__ import annotations

import pytest

from pipeaudit.during.sinks.tensorboard import WRITERS, available_writer, log_tensorboard

SCALARS = {"bubble": 0.25, "step_time_ms": 12.5, "stage1/compute_ms": 3.0}


def _read(logdir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ea = EventAccumulator(str(logdir))
    ea.Reload()
    return {tag: [(e.step, e.value) for e in ea.Scalars(tag)] for tag in ea.Tags()["scalars"]}


@pytest.mark.parametrize("writer", WRITERS)
def test_each_writer_writes_scalars_tensorboard_reads(tmp_path, writer):
    pytest.importorskip("tensorboard")  # the reader
    pytest.importorskip(writer)
    first = log_tensorboard(tmp_path, SCALARS, 4, writer=writer)
    second = log_tensorboard(tmp_path, {k: 2 * v for k, v in SCALARS.items()}, 8, writer=writer)
    assert first != second and "tfevents" in first  # one file per window, none overwritten
    got = _read(tmp_path)
    assert got == {f"pipeaudit/{k}": [(4, pytest.approx(v)), (8, pytest.approx(2 * v))]
                   for k, v in SCALARS.items()}


def test_no_writer_is_one_clear_error(tmp_path):
    with pytest.raises(ModuleNotFoundError, match="pip install tensorboardX"):
        log_tensorboard(tmp_path, SCALARS, 4, writer="none")
    assert available_writer() in (*WRITERS, None)
