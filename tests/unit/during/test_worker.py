"""The audit worker never holds the training up: a detached process (its own session and
process group, no pipe of the training's) that outlives the training, audits what is queued,
and is gone at its bound with the windows it could not audit recorded as skipped."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeaudit.during import queue
from pipeaudit.during.index import AUDIT_FILE, window_folder, window_folders, write_entry
from tests.support.child import repo_env
from tests.support.cli import invoke
from tests.support.paths import REPO

#: A training process: rank 0 of a world of 2 whose rank 1 never writes (it is not there),
#: two profiled windows, then exit.
TRAIN = """
import sys, torch
from torch.profiler import ProfilerActivity, profile, schedule
from pipeaudit.profiler import trace_handler
handler = trace_handler(sys.argv[1], rank_timeout_s=float(sys.argv[2]),
                        audit_bound_s=float(sys.argv[3]), low_priority=sys.argv[4] == "low",
                        log_to=())
w = torch.randn(8, 8, requires_grad=True)
with profile(activities=[ProfilerActivity.CPU], on_trace_ready=handler,
             schedule=schedule(wait=0, warmup=1, active=1, repeat=2)) as prof:
    for _ in range(4):
        (w @ w).sum().backward()
        prof.step()
"""


def _train(out: Path, rank_timeout: float, bound: float, priority: str = "low"):
    """Run the training to its end; (its Popen, stdout, stderr)."""
    pytest.importorskip("torch")
    proc = subprocess.Popen([sys.executable, "-c", TRAIN, str(out), str(rank_timeout),
                             str(bound), priority], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=repo_env(WORLD_SIZE="2", RANK="0"))
    stdout, stderr = proc.communicate(timeout=300)  # returns: the worker holds no pipe
    assert proc.returncode == 0, stderr
    return proc, stdout, stderr


def _pid(stderr: str) -> int:
    """The worker's pid, from the training's line at exit."""
    (pid,) = re.findall(r"the background audit \(pid (\d+)\)", stderr)
    return int(pid)


def _gone(pid: int, within_s: float = 180.0) -> bool:
    """Wait until process ``pid`` has ended (at most ``within_s``)."""
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        if not queue.alive(pid, None):
            return True
        time.sleep(0.2)
    return False


def _leftovers(tmp_path: Path) -> list[int]:
    """Processes whose command line names this test's folder."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if str(tmp_path).encode() in cmd and queue.alive(int(pid), None):
            out.append(int(pid))
    return out


@pytest.fixture
def no_leftover(tmp_path):
    yield
    left = _leftovers(tmp_path)
    for pid in left:  # end them, then fail
        try:
            os.kill(pid, 9)
        except OSError:
            pass
    assert not left, left


def test_training_exits_while_its_worker_runs_on_detached(tmp_path, no_leftover):
    out = tmp_path / "tb"
    train, _, stderr = _train(out, rank_timeout=600, bound=600)
    root = out / "pipeaudit"
    pid = _pid(stderr)
    assert queue.alive(pid, None)  # the training is gone, the worker not
    assert os.getsid(pid) != os.getsid(0) and os.getpgid(pid) != os.getpgid(0)
    with open(f"/proc/{pid}/stat") as fh:
        assert int(fh.read().rsplit(")", 1)[1].split()[2]) != train.pid  # not the training's
    line = [ln for ln in stderr.splitlines() if "not audited yet" in ln]
    assert line == [f"pipeaudit: 2 window(s) not audited yet (step 2, step 4): the background "
                    f"audit (pid {pid}) writes {root / 'step_N' / AUDIT_FILE}, or a skip with "
                    f"its reason, within 600 s"]
    folders = window_folders(out)
    assert [f.name for f in folders] == ["step_00000002", "step_00000004"]
    assert not any((f / AUDIT_FILE).exists() for f in folders)  # still waiting for rank 1
    for f in folders:  # rank 1 "arrives": the worker audits, then ends by itself
        entry = json.loads((f / "rank0.json").read_text())
        write_entry(f, 1, 2, entry["trace"], entry["step"])
    assert _gone(pid)
    for f in folders:
        doc = json.loads((f / AUDIT_FILE).read_text())
        assert doc["kind"] != "window-skipped" and doc["window"]["step"] == int(f.name[5:])


def test_worker_ends_at_its_bound_and_records_the_windows_skipped(tmp_path, no_leftover):
    out = tmp_path / "tb"
    _, _, stderr = _train(out, rank_timeout=600, bound=3, priority="normal")
    assert "within 3 s" in stderr
    assert _gone(_pid(stderr))
    docs = [json.loads((f / AUDIT_FILE).read_text()) for f in window_folders(out)]
    assert [d["kind"] for d in docs] == ["window-skipped"] * 2
    assert docs[0]["skipped"].startswith("not audited within 3 s of the job's last window: ")
    assert docs[0]["window"]["ranks_missing"] == [1]
    assert "for rank 1 of world size 2" in docs[0]["skipped"]
    res = invoke("watch", out, "--once", "--format", "json")  # watch reads the skip
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout)["windows"]
    assert [w["skipped"] for w in got] == [d["skipped"] for d in docs]
    text = invoke("watch", out, "--once").stdout
    assert f"step 2: skipped (1/2 ranks): {docs[0]['skipped']}" in text


def _queue_window(out: Path, step: int, queued_at: float, bound: float) -> Path:
    """A one-rank window of a trace with no pipeline in it, queued as the handler queues it."""
    trace = out / f"h_1.{step}.pt.trace.json"
    trace.parent.mkdir(parents=True, exist_ok=True)
    trace.write_text(json.dumps({"distributedInfo": {"rank": 0, "world_size": 1},
                                 "traceEvents": [{"ph": "X", "name": "aten::mm", "pid": 1,
                                                  "tid": 1, "ts": 0, "dur": 5}]}))
    folder = window_folder(out, step)
    write_entry(folder, 0, 1, trace.name, step)
    queue.enqueue(folder, {"step": step, "world_size": 1, "queued_at": queued_at,
                           "bound_s": bound, "rank_timeout_s": 5, "log_to": []})
    return folder


def _worker(root: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "pipeaudit.during.worker",
                             json.dumps({"root": str(root), "low_priority": False})],
                            cwd=REPO, env=repo_env(), stderr=subprocess.DEVNULL)


def test_one_worker_per_folder_and_a_window_queued_late_is_not_lost(tmp_path, no_leftover):
    out = tmp_path / "tb"
    root = out / "pipeaudit"
    folder = _queue_window(out, 2, time.time(), 600)
    held = queue.try_lock(root)
    assert held is not None and queue.worker_running(root)
    assert queue.try_lock(root) is None
    other = _worker(root)  # the lock is taken: it leaves at once, the window untouched
    assert other.wait(120) == 0 and not (folder / AUDIT_FILE).exists()
    held.close()
    assert not queue.worker_running(root)
    assert [f for f, _ in queue.pending(root)] == [folder]
    worker = _worker(root)
    assert worker.wait(180) == 0
    doc = json.loads((folder / AUDIT_FILE).read_text())
    assert doc["kind"] == "window" and doc["window"]["step"] == 2
    assert queue.pending(root) == [] and not queue.worker_running(root)


def test_a_window_queued_long_ago_is_skipped_not_audited(tmp_path, no_leftover):
    """A queue left by a job that ended (its bound long past): recorded as skipped at once."""
    out = tmp_path / "tb"
    folder = _queue_window(out, 4, time.time() - 1000, 120)
    assert _worker(out / "pipeaudit").wait(180) == 0
    doc = json.loads((folder / AUDIT_FILE).read_text())
    assert doc["kind"] == "window-skipped"
    assert doc["skipped"] == ("not audited within 120 s of the job's last window: its turn "
                              "came only after the bound had passed")
    assert doc["notes"] == [doc["skipped"]]
    assert "not audited within 120 s" in (folder / "audit.log").read_text()


@pytest.mark.parametrize("level,nice,idle", [("idle", 19, True), ("low", 5, False),
                                             ("normal", None, False)])
def test_an_audit_process_sets_its_own_priority(level, nice, idle):
    """In a session of its own, as the worker starts it: its nice, its session group's nice
    (where Linux has autogroups) and SCHED_IDLE for the level."""
    code = ("import os, sys; from pipeaudit.during.priority import lower_priority; "
            "n0 = os.nice(0); lower_priority(sys.argv[1]); "
            "print(n0, os.nice(0), os.sched_getscheduler(0) == os.SCHED_IDLE)")
    res = subprocess.run([sys.executable, "-c", code, level], capture_output=True, text=True,
                         env=repo_env(), cwd=REPO, start_new_session=True, timeout=60)
    before, after, sched_idle = res.stdout.split()
    assert int(after) == (int(before) if nice is None else max(nice, int(before)))
    assert (sched_idle == "True") == idle


def test_a_rerun_into_the_same_folder_queues_its_window_again(tmp_path):
    """The audit.json an earlier run left for the same step is not taken for the new one's."""
    out = tmp_path / "tb"
    folder = _queue_window(out, 4, time.time(), 120)
    (folder / AUDIT_FILE).write_text('{"kind": "window", "old": true}')
    assert queue.pending(out / "pipeaudit") == []
    queue.enqueue(folder, json.loads((folder / queue.QUEUE_FILE).read_text()))
    assert not (folder / AUDIT_FILE).exists()
    assert [f for f, _ in queue.pending(out / "pipeaudit")] == [folder]
