"""The training's audit worker: one detached process per trace folder, started by the handler:

    python -m pipeaudit.during.worker '{"root": "tb/pipeaudit", "low_priority": true}'

It audits the queued windows (:mod:`.queue`) one at a time, in step order, and exits when none
is left. It runs at the lowest CPU priority (SCHED_IDLE, nice 19, its autogroup nice 19) in a
session of its own, so it outlives the training and takes no signal meant for it. While the
training runs, each audit waits for a core the host leaves idle; once the training has exited,
it goes ahead. No worker outlives the newest window by more than that window's bound
(``bound_s``): what cannot be audited by then is recorded as skipped, with the reason, in the
window's ``audit.json`` (``"kind": "window-skipped"``). Errors are written to ``audit.json``
(``"error"``) and the window's ``audit.log``; the process exits 0 and never talks to the
training.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable

POLL_S = 0.25
GRACE_S = 5.0  #: the audit in progress is stopped this long before the bound


class AuditTimeout(BaseException):
    """The bound passed during an audit (a BaseException: no ``except Exception`` hides it)."""


def _lower_priority() -> None:
    """Run only on CPU time the training leaves: SCHED_IDLE where Linux has it, and nice 19.
    Where Linux groups each session for the scheduler (autogroups, which share the CPU fairly
    between sessions whatever their nice), this session's group is set to nice 19 too."""
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


def wait_while_training_busy(spec: dict[str, Any], until: Callable[[], float]) -> float:
    """Wait while the training (``spec``'s pid) runs and the host leaves no core idle, at most
    until ``until()``; returns the seconds waited."""
    from pipeaudit.during.queue import alive

    start = time.monotonic()
    while time.time() < until() and alive(spec.get("pid"), spec.get("pid_start")):
        idle = idle_cores()
        if idle is None or idle >= 1.0:
            break
    return time.monotonic() - start


def wait_for_ranks(folder: Path, world_size: int | None, until: float,
                   stop: Callable[[], float] = lambda: float("inf")) -> tuple[list, float]:
    """(the window's entries, seconds waited): all ``world_size`` ranks, or those there at
    ``until`` or ``stop()`` (epoch seconds). Without a world size, the traces' headers give it."""
    from pipeaudit.during.index import read_entries

    start = time.monotonic()
    while True:
        entries = read_entries(folder)
        if world_size is None:
            world_size = _world_from_traces(entries)
        if world_size is not None and len({e.rank for e in entries}) >= world_size:
            break
        now = time.time()
        if now >= until or now >= stop():
            break
        time.sleep(POLL_S)
    return entries, time.monotonic() - start


def _world_from_traces(entries) -> int | None:
    from pipeaudit.during.traceinfo import read_head

    for e in entries:
        if e.world_size:
            return e.world_size
        _, ws = read_head(e.trace)
        if ws:
            return ws
    return None


def run_window(folder: Path, spec: dict[str, Any], stop: Callable[[], float] | None = None,
               low_priority: bool = False) -> int:
    """Audit the window of ``folder`` (its ``queued.json`` is ``spec``) and write its
    ``audit.json``: the audit, an error, or, when ``stop()`` (epoch seconds) comes first, a
    skip with the reason. ``low_priority``: wait for an idle core while the training runs."""
    from pipeaudit.during.audit_window import WindowAudit, audit_window, write_audit
    from pipeaudit.during.index import AUDIT_FILE

    started = time.monotonic()
    stop = stop or (lambda: float("inf"))
    step = int(spec["step"])
    label = f"step {step}"
    world = spec.get("world_size")
    ranks_until = float(spec.get("queued_at", time.time())) + float(spec.get("rank_timeout_s", 60))
    late = time.time() >= stop()
    entries, waited = wait_for_ranks(folder, world, ranks_until if not late else 0.0, stop)
    world = world or max((e.world_size or 0 for e in entries), default=0) or \
        _world_from_traces(entries)
    missing = [r for r in range(world or 0) if r not in {e.rank for e in entries}]
    idle_wait = 0.0
    why = None
    if late:
        why = "its turn came only after the bound had passed"
    elif missing and time.time() >= stop():
        why = f"waited {waited:.0f} s for {_ranks(missing)} of world size {world}"
    elif entries and low_priority:
        idle_wait = wait_while_training_busy(spec, stop)
        if time.time() >= stop():
            why = f"waited {idle_wait:.0f} s for a core the training left idle"
    result = None
    if why is None:
        try:
            if not entries:
                raise RuntimeError("no rank wrote a trace for this window")
            with _alarm(stop):
                result = audit_window([e.trace for e in entries], label=label, step=step,
                                      world_size=world, missing=missing,
                                      waited_s=round(waited, 1) if missing else None,
                                      baseline=spec.get("gate"))
                _sinks(spec, result, step, folder)
        except AuditTimeout:
            if result is None:
                why = f"its audit was stopped after {time.monotonic() - started:.1f} s"
            else:
                result.notes.append("logging the scalars was stopped at the bound")
        except Exception as exc:  # written down, never raised into anything
            _log(folder, f"audit of {label} failed: {type(exc).__name__}: {exc}")
            _log(folder, traceback.format_exc())
            result = WindowAudit(doc=_doc("window-error", spec, entries, world, missing,
                                          error=f"{type(exc).__name__}: {exc}"),
                                 scalars={}, notes=[])
    if result is None:
        reason = f"not audited within {float(spec.get('bound_s', 0)):g} s of the job's last " \
                 f"window: {why}"
        result = WindowAudit(doc=_doc("window-skipped", spec, entries, world, missing,
                                      skipped=reason), scalars={}, notes=[reason])
    for note in result.notes:
        _log(folder, f"{label}: note: {note}")
    result.doc["notes"] = result.notes
    cost = _cost(started, waited)
    cost["idle_wait_s"] = round(idle_wait, 3)
    result.doc.setdefault("window", {})["cost"] = cost
    write_audit(folder / AUDIT_FILE, result)
    return 0


def _ranks(ranks: list[int]) -> str:
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"


def _doc(kind: str, spec: dict[str, Any], entries, world, missing, **extra) -> dict[str, Any]:
    """A window's audit.json without an audit: ``window-error`` or ``window-skipped``."""
    step = int(spec["step"])
    return {"schema_version": 1, "tool": "pipeaudit", "kind": kind,
            "window": {"label": f"step {step}", "step": step,
                       "files": [str(e.trace) for e in entries], "world_size": world,
                       "ranks_missing": missing}, **extra}


class _alarm:
    """Raise :class:`AuditTimeout` in the main thread at ``stop()``, re-read when the time comes
    (a window queued meanwhile moves it later). Only in the main thread; elsewhere a no-op."""

    def __init__(self, stop: Callable[[], float]) -> None:
        self.stop = stop
        self.armed = threading.current_thread() is threading.main_thread() and \
            hasattr(signal, "setitimer") and stop() != float("inf")

    def _arm(self) -> None:
        signal.setitimer(signal.ITIMER_REAL, max(0.01, self.stop() - time.time()))

    def _fire(self, signum, frame) -> None:
        if time.time() < self.stop() - 0.01:
            self._arm()
            return
        raise AuditTimeout()

    def __enter__(self):
        if self.armed:
            self.old = signal.signal(signal.SIGALRM, self._fire)
            self._arm()
        return self

    def __exit__(self, *exc) -> None:
        if self.armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.old)


def _cost(started: float, waited: float) -> dict[str, float]:
    """This process's wall time on the window (waiting for the ranks included) and its CPU
    time so far, in seconds."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {"wall_s": round(time.monotonic() - started, 3), "waited_s": round(waited, 3),
            "cpu_s": round(ru.ru_utime + ru.ru_stime, 3)}


def _sinks(spec: dict[str, Any], result, step: int, folder: Path) -> None:
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
            _failed(result, "tensorboard", exc, folder)
    if "mlflow" in log_to and spec.get("mlflow"):
        try:
            from pipeaudit.during.sinks.mlflow import log_mlflow

            uri, run_id = spec["mlflow"]
            log_mlflow(uri, run_id, result.scalars, step)
            logged.append({"backend": "mlflow", "run_id": run_id})
        except Exception as exc:
            _failed(result, "mlflow", exc, folder)


def _failed(result, backend: str, exc: Exception, folder: Path) -> None:
    msg = f"logging to {backend} failed: {type(exc).__name__}: {exc}"
    _log(folder, msg)
    result.notes.append(msg)


def _log(folder: Path | None, msg: str) -> None:
    """A line in the window's ``audit.log`` (and on this process's stderr)."""
    line = f"pipeaudit: {msg}"
    print(line, file=sys.stderr, flush=True)
    if folder is not None:
        try:
            from pipeaudit.during.index import LOG_FILE

            with open(folder / LOG_FILE, "a") as fh:
                fh.write(line + "\n")
        except OSError:
            pass


def _watchdog(root: Path) -> None:
    """Past the bound, whatever the main thread is doing: record the pending windows as
    skipped and end the process."""
    from pipeaudit.during.queue import deadline, pending

    while True:
        time.sleep(1.0)
        queue = pending(root)
        end = deadline(queue)
        if end is None or time.time() < end:
            continue
        for folder, spec in queue:
            try:
                _write_skipped(folder, spec, "the worker was ended at the bound")
            except Exception:  # noqa: BLE001 - ending anyway
                pass
        os._exit(0)


def _write_skipped(folder: Path, spec: dict[str, Any], why: str) -> None:
    from pipeaudit.during.audit_window import WindowAudit, write_audit
    from pipeaudit.during.index import AUDIT_FILE, read_entries

    reason = f"not audited within {float(spec.get('bound_s', 0)):g} s of the job's last " \
             f"window: {why}"
    _log(folder, f"step {spec['step']}: note: {reason}")
    doc = _doc("window-skipped", spec, read_entries(folder), spec.get("world_size"), [],
               skipped=reason, notes=[reason])
    write_audit(folder / AUDIT_FILE, WindowAudit(doc=doc, scalars={}, notes=[reason]))


def serve(root: Path, low_priority: bool = True, lock_fd: int | None = None) -> int:
    """Audit the windows queued under the index ``root`` until none is left (or the bound
    passes); returns at once when another worker holds the folder's lock. ``lock_fd``: the
    lock, already held (handed over by the training)."""
    from pipeaudit.during.queue import deadline, pending, try_lock, write_pid

    lock = os.fdopen(lock_fd, "a+") if lock_fd is not None else try_lock(root)
    if lock is None:
        return 0
    write_pid(lock)
    threading.Thread(target=_watchdog, args=(root,), daemon=True).start()

    def stop() -> float:  # the audit in progress gives way a little before the bound
        queue = pending(root)
        end = deadline(queue)
        if end is None:
            return float("inf")
        bound = max(float(s.get("bound_s", 0)) for _, s in queue)
        return end - min(GRACE_S, bound / 4)

    while True:
        queue = pending(root)
        if not queue:  # let go, then look once more: a window queued meanwhile is not lost
            lock.close()
            if not pending(root) or (lock := try_lock(root)) is None:
                return 0
            write_pid(lock)
            continue
        run_window(*queue[0], stop=stop, low_priority=low_priority)


def main(argv: list[str]) -> int:
    try:
        spec = json.loads(argv[0])
        if spec.get("low_priority", True):
            _lower_priority()
        return serve(Path(spec["root"]), bool(spec.get("low_priority", True)),
                     spec.get("lock_fd"))
    except Exception:  # the last net: never a traceback into the training's console
        _log(None, traceback.format_exc())
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
