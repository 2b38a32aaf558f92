"""How much CPU an audit may take from the host: a priority level set by the audit process on
itself, and the host's idle cores.

* ``idle`` (while the training runs): SCHED_IDLE and nice 19: only CPU time nothing else wants;
* ``low`` (once the training has exited, and the worker that only waits and watches): nice 5;
* ``normal``: unchanged.

Where Linux groups each session for the scheduler (autogroups, which share the CPU fairly
between sessions whatever a process's nice), the process's session group gets the same nice
(``/proc/self/autogroup``): an audit runs in a session of its own for that reason.
"""

from __future__ import annotations

import os
import time

LEVELS = {"idle": 19, "low": 5, "normal": 0}


def lower_priority(level: str) -> None:
    """Set this process (and its session's scheduler group) to ``level``; what the OS refuses
    is left as it is."""
    nice = LEVELS[level]
    if not nice:
        return
    try:
        with open("/proc/self/autogroup", "w") as fh:
            fh.write(str(nice))
    except OSError:
        pass
    if level == "idle":
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))  # type: ignore[attr-defined]
        except (AttributeError, OSError):
            pass
    try:
        os.nice(nice - os.nice(0))
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
