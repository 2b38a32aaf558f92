"""Where a command's time goes: its phases on stderr when ``PIPEAUDIT_TIMINGS=1``.

For "why is analyze slow on my trace" and for the benchmarks: one line at the end of
``pipeaudit analyze``, e.g.::

    pipeaudit timings: start 0.62 s · ranks 1.86 s (4 ranks, 2 jobs, read: scanner, 4 MiB batches) · audit 0.30 s · report 0.10 s · total 2.88 s

``start`` is from the process's start (the interpreter, the imports, finding the files) to
the first byte of the first rank read (``analyze`` reads it on a thread while it imports
the rest: :mod:`pipeaudit.trace.readahead`), or, where this process reads none, to the
ranks being handed out; ``ranks`` is the decode and reduction of every rank, the part that
``--jobs`` runs in parallel, with the trace reader's mode
(:meth:`pipeaudit.trace.options.ReadOptions.describe`); the rest runs once, in this process,
whatever the jobs.
Off by default, and then :func:`mark` costs one dictionary lookup.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TextIO

#: Set to 1 to print the phase timings on stderr.
ENV = "PIPEAUDIT_TIMINGS"

_marks: list[tuple[str, float, str]] = []


def enabled() -> bool:
    """True when ``PIPEAUDIT_TIMINGS`` asks for the timings."""
    return os.environ.get(ENV, "") not in ("", "0")


def mark(phase: str, note: str = "") -> None:
    """``phase`` ends now (``note``: what it did, e.g. "4 ranks, 2 jobs")."""
    if enabled():
        _marks.append((phase, time.monotonic(), note))


def mark_once(phase: str, note: str = "") -> None:
    """:func:`mark`, unless ``phase`` has been marked already (e.g. ``start``, which the
    first read marks, whoever starts it)."""
    if all(p != phase for p, _, _ in _marks):
        mark(phase, note)


def process_age() -> float | None:
    """Seconds since this process started (Linux: from /proc), else None."""
    try:
        with open("/proc/self/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        with open("/proc/uptime", "rb") as fh:
            uptime = float(fh.read().split()[0])
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: starttime, in ticks
    except (OSError, ValueError, IndexError):
        return None
    return max(0.0, uptime - started)


def report(stream: TextIO | None = None) -> None:
    """Print the phases marked so far as one line (and forget them)."""
    if not enabled() or not _marks:
        return
    now = time.monotonic()
    age = process_age()
    t0 = now - age if age is not None else _marks[0][1]
    parts, prev = [], t0
    for phase, at, note in _marks:
        parts.append(f"{phase} {at - prev:.2f} s" + (f" ({note})" if note else ""))
        prev = at
    parts.append(f"total {now - t0:.2f} s")
    _marks.clear()
    print("pipeaudit timings: " + " · ".join(parts), file=stream or sys.stderr)
