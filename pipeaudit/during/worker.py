"""The audit of one window, run by the handler as a low-priority subprocess:

    python -m pipeaudit.during.worker '{"folder": ..., "world_size": 4, ...}'

It runs at the lowest CPU priority (SCHED_IDLE, nice 19, its autogroup nice 19), waits until every rank's index entry of the
window is there (each rank writes its entry after its trace), or ``rank_timeout_s`` has
passed, then (one audit of the folder at a time, once the host leaves a core idle, for at most
``idle_wait_s``) audits the files that arrived, writes
``audit.json`` and logs the scalars to TensorBoard and MLflow. Every error is caught: it is
written to ``audit.log`` and to ``audit.json`` (``"error"``), and the process exits 0. The
training is never waited on: this process does not talk to it.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from pipeaudit.during.index import AUDIT_FILE, read_entries

POLL_S = 0.25


def _lower_priority() -> None:
    """Run only on CPU time the training leaves: SCHED_IDLE where Linux has it, and nice 19.
    The handler starts this process in a session of its own; where Linux groups each session
    for the scheduler (autogroups, which share the CPU fairly between sessions whatever their
    nice), the group is set to nice 19 too."""
    try:
        with open("/proc/self/autogroup", "w") as fh:
            fh.write("19")
    except OSError:
        pass
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))  # type: ignore[attr-defined]
    except (AttributeError, OSError):
        pass
    try:
        os.nice(19)
    except OSError:
        pass


def idle_cores(interval_s: float = 0.5) -> float | None:
    """Cores' worth of CPU time the host left idle over ``interval_s`` (Linux /proc/stat);
    None where it cannot tell."""
    def sample() -> tuple[int, int]:
        with open("/proc/stat") as fh:
            v = [int(x) for x in fh.readline().split()[1:]]
        return v[3] + (v[4] if len(v) > 4 else 0), sum(v)  # idle + iowait, total

    try:
        idle0, total0 = sample()
        time.sleep(interval_s)
        idle1, total1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    if total1 <= total0:
        return None
    return (idle1 - idle0) / (total1 - total0) * (os.cpu_count() or 1)


def wait_for_idle_core(max_wait_s: float, need: float = 1.0) -> float:
    """Wait (at most ``max_wait_s``) until the host leaves ``need`` cores idle: on a GPU node
    at once; where the training keeps every core busy, until it leaves one (often its end).
    Returns the seconds waited."""
    start = time.monotonic()
    while time.monotonic() - start < max_wait_s:
        idle = idle_cores()
        if idle is None or idle >= need:
            break
    return time.monotonic() - start


@contextlib.contextmanager
def one_at_a_time(folder: Path):
    """Audits of one trace folder run one after the other (an exclusive lock on
    ``pipeaudit/.lock``; none where the filesystem has no locks)."""
    try:
        import fcntl

        fh = open(folder.parent / ".lock", "a")
    except (ImportError, OSError):
        yield
        return
    with fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX)
        except OSError:
            pass
        yield


def wait_for_ranks(folder: Path, world_size: int | None, timeout_s: float) -> tuple[list, float]:
    """(the window's entries, seconds waited): all ``world_size`` ranks, or those there at the
    timeout. Without a world size, the auditing rank's trace header gives it."""
    start = time.monotonic()
    while True:
        entries = read_entries(folder)
        if world_size is None:
            world_size = _world_from_traces(entries)
        waited = time.monotonic() - start
        if world_size is not None and len({e.rank for e in entries}) >= world_size:
            return entries, waited
        if waited >= timeout_s:
            return entries, waited
        time.sleep(POLL_S)


def _world_from_traces(entries) -> int | None:
    from pipeaudit.during.traceinfo import read_head

    for e in entries:
        if e.world_size:
            return e.world_size
        _, ws = read_head(e.trace)
        if ws:
            return ws
    return None


def run(spec: dict[str, Any]) -> int:
    """Audit the window of ``spec`` (see :func:`pipeaudit.during.handler.TraceHandler`)."""
    from pipeaudit.during.audit_window import WindowAudit, audit_window, write_audit

    started = time.monotonic()
    folder = Path(spec["folder"])
    step = int(spec["step"])
    label = f"step {step}"
    world = spec.get("world_size")
    entries, waited = wait_for_ranks(folder, world, float(spec.get("rank_timeout_s", 300)))
    world = world or max((e.world_size or 0 for e in entries), default=0) or \
        _world_from_traces(entries)
    present = {e.rank for e in entries}
    idle_wait = 0.0
    missing = [r for r in range(world or 0) if r not in present]
    try:
        if not entries:
            raise RuntimeError("no rank wrote a trace for this window")
        with one_at_a_time(folder):
            idle_wait = wait_for_idle_core(float(spec.get("idle_wait_s", 0)))
            result = audit_window([e.trace for e in entries], label=label, step=step,
                                  world_size=world, missing=missing,
                                  waited_s=round(waited, 1) if missing else None,
                                  baseline=spec.get("gate"))
    except Exception as exc:  # written down, never raised into anything
        _log(f"audit of {label} failed: {type(exc).__name__}: {exc}")
        _log(traceback.format_exc())
        doc = {"schema_version": 1, "tool": "pipeaudit", "kind": "window-error",
               "window": {"label": label, "step": step,
                          "files": [str(e.trace) for e in entries], "world_size": world,
                          "ranks_missing": missing},
               "error": f"{type(exc).__name__}: {exc}"}
        result = WindowAudit(doc=doc, scalars={}, notes=[])
    for note in result.notes:
        _log(f"{label}: note: {note}")
    _sinks(spec, result, step)
    cost = _cost(started, waited)
    cost["idle_wait_s"] = round(idle_wait, 3) if entries else 0.0
    result.doc.setdefault("window", {})["cost"] = cost
    write_audit(folder / AUDIT_FILE, result)
    return 0


def _cost(started: float, waited: float) -> dict[str, float]:
    """This process's wall time (waiting for the ranks included) and CPU time, in seconds."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {"wall_s": round(time.monotonic() - started, 3), "waited_s": round(waited, 3),
            "cpu_s": round(ru.ru_utime + ru.ru_stime, 3)}


def _sinks(spec: dict[str, Any], result, step: int) -> None:
    """TensorBoard and MLflow; each failure is noted in the document and the log."""
    if not result.scalars:
        return
    logged = result.doc.setdefault("logged_to", [])
    log_to = spec.get("log_to") or ()
    if "tensorboard" in log_to and spec.get("tensorboard_dir"):
        try:
            from pipeaudit.during.sinks.tensorboard import log_tensorboard

            path = log_tensorboard(spec["tensorboard_dir"], result.scalars, step)
            logged.append({"backend": "tensorboard", "file": path})
        except Exception as exc:
            _failed(result, "tensorboard", exc)
    if "mlflow" in log_to and spec.get("mlflow"):
        try:
            from pipeaudit.during.sinks.mlflow import log_mlflow

            uri, run_id = spec["mlflow"]
            log_mlflow(uri, run_id, result.scalars, step)
            logged.append({"backend": "mlflow", "run_id": run_id})
        except Exception as exc:
            _failed(result, "mlflow", exc)


def _failed(result, backend: str, exc: Exception) -> None:
    msg = f"logging to {backend} failed: {type(exc).__name__}: {exc}"
    _log(msg)
    result.notes.append(msg)
    result.doc["notes"] = result.notes


def _log(msg: str) -> None:
    print(f"pipeaudit: {msg}", file=sys.stderr, flush=True)


def main(argv: list[str]) -> int:
    try:
        spec = json.loads(argv[0])
        if spec.get("low_priority", True):
            _lower_priority()
        return run(spec)
    except Exception:  # the last net: never a traceback into the training's console
        _log(traceback.format_exc())
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
