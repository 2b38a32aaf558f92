"""What a trace file says about the window it belongs to, read cheaply: its rank and world
size (``distributedInfo`` in the first bytes) and its first ``ProfilerStep#N`` (the body).

Torch's profiler numbers ``ProfilerStep#N`` by the profiler's step, the same on every rank of a
job that steps together, so files of one window share their first step number whatever their
names and write times.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from pipeaudit.errors import TraceError
from pipeaudit.trace.source import TraceBytes

HEAD_BYTES = 64 * 1024
_DIST = re.compile(rb'"distributedInfo"\s*:\s*\{([^}]*)\}')
_RANK = re.compile(rb'"rank"\s*:\s*(\d+)')
_WORLD = re.compile(rb'"world_size"\s*:\s*(\d+)')
_STEP = re.compile(rb'"name"\s*:\s*"ProfilerStep#(\d+)"')


@dataclass(frozen=True)
class TraceInfo:
    """Rank and world size from the header (None when absent) and the first profiler step."""

    rank: int | None
    world_size: int | None
    first_step: int | None


def dist_of(head: bytes) -> tuple[int | None, int | None]:
    """(rank, world_size) of the ``distributedInfo`` in a trace's first bytes."""
    m = _DIST.search(head)
    if m is None:
        return None, None
    r, w = _RANK.search(m.group(1)), _WORLD.search(m.group(1))
    return (int(r.group(1)) if r else None), (int(w.group(1)) if w else None)


def read_head(path: Path) -> tuple[int | None, int | None]:
    """(rank, world_size) of a trace file; (None, None) when it cannot be read yet."""
    try:
        return dist_of(TraceBytes(path).head(HEAD_BYTES))
    except (TraceError, OSError):
        return None, None


def read_info(path: Path) -> TraceInfo:
    """Rank, world size and first ``ProfilerStep`` of a complete trace file."""
    try:
        chunks = TraceBytes(path).chunks()
        head = b""
        first: int | None = None
        tail = b""
        for chunk in chunks:
            if len(head) < HEAD_BYTES:
                head += chunk[:HEAD_BYTES - len(head)]
            steps = [int(x) for x in _STEP.findall(tail + chunk)]
            if steps:
                first = min(steps) if first is None else min(first, *steps)
            tail = chunk[-64:]
    except (TraceError, OSError):
        return TraceInfo(None, None, None)
    rank, world = dist_of(head)
    return TraceInfo(rank, world, first)
