"""trace_handler in a real (single-process) torch.profiler run: torch's files, an audit per
window that never touches the training, and no torch at import."""

from __future__ import annotations

import json
import re

import pytest

from pipeaudit.audit.found import NO_PIPELINE
from tests.support.child import run_python

NAME = re.compile(r"^[\w.-]+_\d+\.\d{19}\.pt\.trace\.json(\.gz)?$")


def _profile(handler, windows: int = 2) -> int:
    """A tiny training-like loop under torch.profiler; returns the steps it ran."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    w = torch.randn(16, 16, requires_grad=True)
    steps = 0
    with profile(activities=[ProfilerActivity.CPU],
                 schedule=schedule(wait=0, warmup=1, active=1, repeat=windows),
                 on_trace_ready=handler) as prof:
        for _ in range(2 * windows):
            (w @ w).sum().backward()
            prof.step()
            steps += 1
    return steps


def test_import_does_not_import_torch():
    res = run_python("import sys, pipeaudit.profiler, pipeaudit.during.watch; "
                     "print('torch' in sys.modules)")
    assert res.returncode == 0 and res.stdout.strip() == "False", res.stderr


def test_same_files_as_tensorboard_trace_handler(tmp_path):
    pytest.importorskip("torch")
    from torch.profiler import tensorboard_trace_handler

    from pipeaudit.profiler import trace_handler

    _profile(tensorboard_trace_handler(str(tmp_path / "torch"), use_gzip=True))
    _profile(trace_handler(str(tmp_path / "ours"), use_gzip=True, audit=False))
    theirs = sorted(p.name for p in (tmp_path / "torch").iterdir())
    ours = sorted(p.name for p in (tmp_path / "ours").iterdir())
    assert len(theirs) == len(ours) == 2
    assert all(NAME.match(n) for n in theirs + ours)
    assert {n.split(".")[0] for n in theirs} == {n.split(".")[0] for n in ours}  # host_pid


def test_a_window_that_cannot_be_audited_is_written_down_and_training_goes_on(tmp_path):
    """A trace with no pipeline in it: the audit says so in audit.json; the loop is unharmed."""
    pytest.importorskip("torch")
    from pipeaudit.profiler import trace_handler

    handler = trace_handler(str(tmp_path), rank_timeout_s=5, log_to=("tensorboard",),
                            low_priority=False)  # prompt on a machine others load
    assert _profile(handler) == 4
    docs = handler.wait(120)
    assert [d["window"]["step"] for d in docs] == [2, 4]
    for d in docs:
        assert d["schema_version"] == 1 and d["kind"] == "window"
        assert d["audit"]["pipeline_found"] is False
        assert d["window"]["world_size"] == 1 and d["window"]["waited_s"] is None
        assert any(NO_PIPELINE in n for n in d["notes"])  # the one no-pipeline line
        assert d["scalars"] == {}
    assert len(list(tmp_path.glob("*.pt.trace.json"))) == 2
    log = (tmp_path / "pipeaudit" / "step_00000002" / "audit.log").read_text()
    assert "Traceback" not in log and NO_PIPELINE in log


def test_unknown_backend_is_refused():
    from pipeaudit.profiler import trace_handler

    with pytest.raises(ValueError, match="unknown backend"):
        trace_handler("x", log_to=("tensorboard", "neptune"))


def test_worker_writes_an_unreadable_window_down(tmp_path):
    """A damaged trace: audit.json says what failed, the worker returns 0, nothing raises."""
    from pipeaudit.during import worker
    from pipeaudit.during.index import window_folder, write_entry

    (tmp_path / "h_1.1.pt.trace.json").write_text('{"traceEvents": [{"ph": "X", "ts": ')
    folder = window_folder(tmp_path, 3)
    write_entry(folder, 0, 1, "h_1.1.pt.trace.json", 3)
    assert worker.run_window(folder, {"step": 3, "world_size": 1, "rank_timeout_s": 1,
                                      "log_to": ["tensorboard"],
                                      "tensorboard_dir": str(tmp_path)}) == 0
    doc = json.loads((folder / "audit.json").read_text())
    assert doc["kind"] == "window-error" and "h_1.1.pt.trace.json" in doc["error"]
    assert not list(tmp_path.glob("events.out.tfevents*"))  # nothing logged for it
