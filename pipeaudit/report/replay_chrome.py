"""Write a replay as Chrome-trace JSON (opens in Perfetto and chrome://tracing).

One process per rank (``pid`` = rank, named ``rank N``), one thread (``compute``); each action
is a complete event (``ph: "X"``) named like ``F3 s1`` (kind, microbatch, stage) with ``cat``
the kind and ``args`` holding stage, kind, microbatch. Only documented Trace Event Format fields
are used: name, cat, ph, ts, dur, pid, tid, args, and the ``M`` metadata events process_name,
process_sort_index and thread_name. ``ts``/``dur`` are microseconds: one simulated time unit is
written as ``unit_us`` microseconds (default 1000, i.e. a unit reads as 1 ms).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pipeaudit.outfiles import write_text_atomic
from pipeaudit.schedules.replay import ReplayResult


def chrome_trace_events(result: ReplayResult, unit_us: float = 1000.0, label: str = "") -> dict[str, Any]:
    """The replay as a Chrome-trace JSON object."""
    events: list[dict[str, Any]] = []
    prefix = f"{label} " if label else ""
    for r in range(result.num_ranks):
        events.append({"name": "process_name", "ph": "M", "pid": r, "tid": 0,
                       "args": {"name": f"{prefix}rank {r}"}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": r, "tid": 0,
                       "args": {"sort_index": r}})
        events.append({"name": "thread_name", "ph": "M", "pid": r, "tid": 0,
                       "args": {"name": "compute"}})
    t0 = result.window_start
    for a in result.actions:
        act = a.action
        events.append({
            "name": f"{act.kind}{act.microbatch} s{act.stage}",
            "cat": act.kind,
            "ph": "X",
            "ts": round((a.start - t0) * unit_us, 3),
            "dur": round((a.end - a.start) * unit_us, 3),
            "pid": a.rank,
            "tid": 0,
            "args": {"stage": act.stage, "kind": act.kind, "microbatch": act.microbatch},
        })
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_chrome_trace(result: ReplayResult, path: str | Path, unit_us: float = 1000.0,
                       label: str = "") -> None:
    """Write :func:`chrome_trace_events` to ``path`` (atomically)."""
    write_text_atomic(path, json.dumps(chrome_trace_events(result, unit_us, label)),
                      what="the Chrome trace")
