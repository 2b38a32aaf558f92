"""The hand-off from the training to its audit worker: files beside the window index.

The auditing rank writes ``queued.json`` into a window's folder (``{dir}/pipeaudit/step_N/``):
what the worker needs (world size, rank timeout, sinks, gate, the training's pid) and when the
window was queued. A window is pending while it has ``queued.json`` and no ``audit.json``.
One worker per trace folder at a time: it holds an exclusive lock on
``{dir}/pipeaudit/.worker.lock`` (its pid written inside) for as long as it runs. The
training starts a worker only when it can take the lock, and hands the held lock to it, so
a worker still starting is never taken for none.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import IO, Any

from pipeaudit.during.index import AUDIT_FILE, step_of_folder

QUEUE_FILE = "queued.json"
LOCK_FILE = ".worker.lock"


def enqueue(folder: Path, spec: dict[str, Any]) -> Path:
    """Write the window's ``queued.json`` atomically, after removing the ``audit.json`` an
    earlier run into the same folder left for the same step (the window is pending again)."""
    folder.mkdir(parents=True, exist_ok=True)
    try:
        (folder / AUDIT_FILE).unlink()
    except FileNotFoundError:
        pass
    path = folder / QUEUE_FILE
    tmp = folder / f".{QUEUE_FILE}.tmp"
    tmp.write_text(json.dumps(spec))
    os.replace(tmp, path)
    return path


def pending(root: Path) -> list[tuple[Path, dict[str, Any]]]:
    """(folder, spec) of every window under the index ``root`` that is queued and has no
    ``audit.json`` yet, by step."""
    try:
        names = os.listdir(root)
    except OSError:
        return []
    out = []
    for name in names:
        folder = root / name
        step = step_of_folder(folder)
        if step is None or (folder / AUDIT_FILE).exists():
            continue
        try:
            spec = json.loads((folder / QUEUE_FILE).read_text())
        except (OSError, ValueError):
            continue
        out.append((step, folder, spec))
    return [(f, s) for _, f, s in sorted(out, key=lambda t: t[0])]


def deadline(queue: list[tuple[Path, dict[str, Any]]]) -> float | None:
    """When the worker must be gone (epoch seconds): the newest window's queue time plus its
    bound; None for an empty queue."""
    return max((float(s.get("queued_at", 0)) + float(s.get("bound_s", 0)) for _, s in queue),
               default=None)


def try_lock(root: Path) -> IO[str] | None:
    """The worker lock, held (the open file; closing it releases), or None when another
    process holds it. Where the filesystem has no locks, an unlocked handle."""
    root.mkdir(parents=True, exist_ok=True)
    fh = open(root / LOCK_FILE, "a+")
    try:
        import fcntl

        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.close()
        return None
    except (ImportError, OSError):
        pass
    return fh


def write_pid(lock: IO[str], pid: int | None = None) -> None:
    """Record the lock holder's pid (default: this process's) in the lock file."""
    lock.seek(0)
    lock.truncate()
    lock.write(str(pid or os.getpid()))
    lock.flush()


def worker_running(root: Path) -> bool:
    """Whether a worker holds the lock of ``root`` now (a probe: takes and drops the lock)."""
    lock = try_lock(root)
    if lock is None:
        return True
    lock.close()
    return False


def worker_pid(root: Path) -> int | None:
    """The pid the last worker of ``root`` wrote into the lock file."""
    try:
        return int((root / LOCK_FILE).read_text().strip())
    except (OSError, ValueError):
        return None


def process_start(pid: int) -> str | None:
    """The start time of process ``pid`` (Linux ``/proc``; None elsewhere or when gone), to
    tell it from a later process given the same pid."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def alive(pid: int | None, start: str | None) -> bool:
    """Whether the process ``pid`` that started at ``start`` still runs (not a zombie)."""
    if not pid:
        return False
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return fields[0] != "Z" and (start is None or fields[19] == start)
    except FileNotFoundError:
        return False
    except (OSError, IndexError):
        pass
    try:  # no /proc: signal 0 tells whether the pid exists
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True
