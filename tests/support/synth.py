"""Tiny Kineto-like traces built in code, for the tests (no torch needed).

    from tests.support.synth import trace, x, mem, write
    write(tmp / "rank0.json", trace([x("PP:0F0", 1_700_000_000_000_000, 120.5)], rank=0, world_size=2))

``x`` makes a complete event (ts and dur in µs, as Kineto writes them; ``args`` keywords use
python names, ``external_id`` becomes ``"External id"``), ``mem`` a ``[memory]`` sample,
``trace`` a whole document with ``distributedInfo`` and ``baseTimeNanoseconds`` when asked,
``write`` writes it (gzip when the name ends in .gz), ``simple_rank`` a three-event rank.
Floats are written by ``json``; to write exact decimals pass the document as text.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

__all__ = ["mem", "simple_rank", "trace", "write", "x"]


def x(name: str, ts: Any, dur: Any = 1, cat: str = "cpu_op", pid: Any = 100, tid: Any = 100,
      **args: Any) -> dict:
    """A complete event; ``args`` keys use python names mapped to Kineto's."""
    e: dict[str, Any] = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts}
    if dur is not None:
        e["dur"] = dur
    mapped = {{"external_id": "External id"}.get(k, k): v for k, v in args.items()}
    if mapped:
        e["args"] = mapped
    return e


def mem(ts: Any, total: int, device_id: int = 0, device_type: Any = 1) -> dict:
    return {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 100,
            "tid": 100, "ts": ts, "args": {"Total Allocated": total, "Device Id": device_id,
                                          "Device Type": device_type, "Bytes": 8, "Addr": 1}}


def trace(events: list[dict], *, rank: int | None = None, world_size: int | None = None,
          backend: str | None = "gloo", base_ns: int | None = None, **header: Any) -> dict:
    doc: dict[str, Any] = {"schemaVersion": 1, "deviceProperties": []}
    if rank is not None or world_size is not None:
        info: dict[str, Any] = {}
        if backend is not None:
            info["backend"] = backend
        if rank is not None:
            info["rank"] = rank
        if world_size is not None:
            info["world_size"] = world_size
        doc["distributedInfo"] = info
    doc.update(header)
    doc["traceName"] = "built-in-test"
    if base_ns is not None:
        doc["baseTimeNanoseconds"] = base_ns
    doc["traceEvents"] = events
    return doc


def write(path: Path, doc: Any, *, gz: bool | None = None) -> Path:
    """Write ``doc`` (a dict, or ready text/bytes) as JSON; gzip if ``gz`` or the name ends in .gz."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = doc if isinstance(doc, bytes) else (doc if isinstance(doc, str) else json.dumps(doc)).encode()
    if gz if gz is not None else path.name.endswith(".gz"):
        data = gzip.compress(data)
    path.write_bytes(data)
    return path


def simple_rank(rank: int, world_size: int | None = 4, t0_us: float = 1_700_000_000_000_000.0,
                **kw: Any) -> dict:
    """A one-rank trace of a few events starting at ``t0_us`` (epoch µs)."""
    return trace(
        [
            x("ProfilerStep#1", t0_us, 1000.0, cat="user_annotation"),
            x(f"PP:{rank}F0", t0_us + 10, 200.0, cat="user_annotation"),
            x("aten::mm", t0_us + 20, 50.5, external_id=7),
        ],
        rank=rank, world_size=world_size, **kw,
    )
