"""The training's audit worker: one detached process per trace folder, started by the handler:

    python -m pipeaudit.during.worker '{"root": "tb/pipeaudit", "low_priority": true}'

It takes the queued windows (:mod:`.queue`) one at a time, in step order, and exits when none
is left. It runs in a session of its own, so it outlives the training and takes no signal
meant for it; it only waits and watches (a few file reads a second, at the ``low``
priority). Per window it waits for every rank's entry (until ``rank_timeout_s`` after the
window), then, while the training runs, for a core the host leaves idle, and starts the
window's audit (:mod:`.auditor`) in a process of its own: at the ``idle`` priority while the
training runs (restarted at ``low`` should the training end first), at ``low`` after it
(:mod:`.priority`). Nothing outlives the
newest window by more than its bound (``bound_s``): an audit still running then is ended,
and each window not audited is recorded as skipped, with the reason, in its ``audit.json``
(``"kind": "window-skipped"``). The worker never talks to the training and exits 0.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

POLL_S = 0.25


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


def _training_runs(spec: dict[str, Any]) -> bool:
    """Whether a process of the training (rank 0, its launcher: ``spec["training"]``) runs."""
    from pipeaudit.during.queue import alive

    return any(alive(pid, start) for pid, start in spec.get("training") or ())


def wait_while_training_busy(spec: dict[str, Any], stop: Callable[[], float]) -> float:
    """Wait while the training runs and the host leaves no core idle, at most
    until ``stop()``; returns the seconds waited."""
    from pipeaudit.during.priority import idle_cores

    start = time.monotonic()
    while time.time() < stop() and _training_runs(spec):
        idle = idle_cores()
        if idle is None or idle >= 1.0:
            break
    return time.monotonic() - start


def run_window(folder: Path, spec: dict[str, Any], stop: Callable[[], float] | None = None,
               low_priority: bool = False) -> int:
    """Audit the window of ``folder`` (its ``queued.json`` is ``spec``) in a process of its
    own, which writes ``audit.json``; when ``stop()`` (epoch seconds) comes first, end it and
    record the window as skipped, with the reason. ``low_priority``: the audit waits for an
    idle core while the training runs, and runs at the lowest priority (see the module)."""
    stop = stop or (lambda: float("inf"))
    world = spec.get("world_size")
    queued_at = float(spec.get("queued_at", time.time()))
    ranks_until = queued_at + float(spec.get("rank_timeout_s", 60))
    late = time.time() >= stop()
    entries, waited = wait_for_ranks(folder, world, ranks_until if not late else 0.0, stop)
    since = max(waited, time.time() - queued_at)  # the ranks' wait, from the window's export
    world = world or max((e.world_size or 0 for e in entries), default=0) or \
        _world_from_traces(entries)
    missing = [r for r in range(world or 0) if r not in {e.rank for e in entries}]
    idle_wait = 0.0
    if late:
        why = "its turn came only after the bound had passed"
    elif missing and time.time() >= stop():
        why = f"waited {since:.0f} s for {_ranks(missing)} of world size {world}"
    else:
        if entries and low_priority:
            idle_wait = wait_while_training_busy(spec, stop)
        why = (f"waited {idle_wait:.0f} s for a core the training left idle"
               if time.time() >= stop() else None)
    if why is None:
        job = {**spec, "folder": str(folder), "files": [str(e.trace) for e in entries],
               "world_size": world, "missing": missing, "waited_s": round(since, 1),
               "cost": {"waited_s": round(waited, 3), "idle_wait_s": round(idle_wait, 3)}}
        why = _audit_in_process(folder, job, stop, low_priority)
    if why is not None:
        _write_skipped(folder, spec, why, [str(e.trace) for e in entries], world, missing)
    return 0


def _audit_in_process(folder: Path, job: dict[str, Any], stop: Callable[[], float],
                      low_priority: bool) -> str | None:
    """Run :mod:`.auditor` on ``job`` until it ends or ``stop()``; None when it wrote the
    window's audit.json, else why not."""
    from pipeaudit.during.index import AUDIT_FILE

    started = time.monotonic()
    level = "normal"
    if low_priority:
        level = "idle" if _training_runs(job) else "low"
    proc = _start_auditor(folder, job, level)
    try:
        while proc.poll() is None:
            if time.time() >= stop() and not (folder / AUDIT_FILE).exists():
                return f"its audit was ended after {time.monotonic() - started:.1f} s"
            if level == "idle" and not _training_runs(job):  # no training left to yield to
                _end(proc)
                level = "low"
                proc = _start_auditor(folder, job, level)
            time.sleep(POLL_S)
    finally:
        _end(proc)
    if (folder / AUDIT_FILE).exists():
        return None
    return f"its audit process ended with code {proc.returncode} and no result (see audit.log)"


def _start_auditor(folder: Path, job: dict[str, Any], level: str) -> subprocess.Popen:
    from pipeaudit.during.index import LOG_FILE

    with open(folder / LOG_FILE, "ab") as log:
        return subprocess.Popen([sys.executable, "-m", "pipeaudit.during.auditor",
                                 json.dumps({**job, "level": level})],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=log, close_fds=True, start_new_session=True)


def _end(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def _ranks(ranks: list[int]) -> str:
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"


def _write_skipped(folder: Path, spec: dict[str, Any], why: str, files: list[str],
                   world: int | None, missing: list[int]) -> None:
    """The window's audit.json when it was not audited: ``window-skipped`` and the reason."""
    from pipeaudit.during.audit_window import WindowAudit, write_audit
    from pipeaudit.during.index import AUDIT_FILE

    step = int(spec["step"])
    reason = f"not audited within {float(spec.get('bound_s', 0)):g} s of the job's last " \
             f"window: {why}"
    _log(folder, f"step {step}: note: {reason}")
    doc = {"schema_version": 1, "tool": "pipeaudit", "kind": "window-skipped",
           "window": {"label": f"step {step}", "step": step, "files": files,
                      "world_size": world, "ranks_missing": missing},
           "skipped": reason, "notes": [reason]}
    write_audit(folder / AUDIT_FILE, WindowAudit(doc=doc, scalars={}, notes=[reason]))


def _log(folder: Path | None, msg: str) -> None:
    """A line in the window's ``audit.log`` (else on this process's stderr)."""
    line = f"pipeaudit: {msg}\n"
    if folder is not None:
        from pipeaudit.during.index import LOG_FILE

        try:
            with open(folder / LOG_FILE, "a") as fh:
                fh.write(line)
            return
        except OSError:
            pass
    sys.stderr.write(line)


def serve(root: Path, low_priority: bool = True, lock_fd: int | None = None) -> int:
    """Audit the windows queued under the index ``root`` until none is left (or the bound
    passes); returns at once when another worker holds the folder's lock. ``lock_fd``: the
    lock, already held (handed over by the training)."""
    from pipeaudit.during.queue import deadline, pending, try_lock, write_pid

    lock = os.fdopen(lock_fd, "a+") if lock_fd is not None else try_lock(root)
    if lock is None:
        return 0
    write_pid(lock)

    def stop() -> float:  # re-read: a window queued meanwhile moves the bound later
        end = deadline(pending(root))
        return float("inf") if end is None else end

    while True:
        queue = pending(root)
        if not queue:  # let go, then look once more: a window queued meanwhile is not lost
            lock.close()
            if not pending(root) or (lock := try_lock(root)) is None:
                return 0
            write_pid(lock)
            continue
        try:
            run_window(*queue[0], stop=stop, low_priority=low_priority)
        except Exception as exc:  # a bug of the worker: the window is written off, not retried
            _log(queue[0][0], traceback.format_exc())
            _write_skipped(*queue[0], f"the worker failed: {type(exc).__name__}: {exc}", [],
                           queue[0][1].get("world_size"), [])


def main(argv: list[str]) -> int:
    try:
        spec = json.loads(argv[0])
        if spec.get("low_priority", True):
            from pipeaudit.during.priority import lower_priority

            lower_priority("low")
        return serve(Path(spec["root"]), bool(spec.get("low_priority", True)),
                     spec.get("lock_fd"))
    except Exception:  # the last net: never a traceback into the training's console
        _log(None, traceback.format_exc())
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
