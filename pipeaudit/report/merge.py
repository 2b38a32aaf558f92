"""Stream the original trace events of every rank into one merged Chrome trace.

One rank's file is read at a time and its events are re-encoded one by one: at no time are
two ranks' events in memory. Each event keeps every field it had (values pass through as the
exact JSON text of the file) except:

* ``ts``: re-based exactly (integer ns arithmetic) to microseconds from the merged file's
  origin, like the pipeline tracks;
* ``pid``: every (rank, original pid) gets a new integer pid, so rank 0's process 1234 and
  rank 1's process 1234 (or two ``"Spans"``) stay apart; ``process_name`` becomes
  ``rank R · <original name>`` and ``process_sort_index`` groups each rank's processes
  right after its pipeline process;
* ``id`` / ``bind_id`` (flows such as Kineto's ``ac2g`` and async events): renumbered per
  rank so that rank 0's flow 7 does not join rank 1's flow 7.

Perfetto refuses negative timestamps, so the origin of a merged file is the earliest event
of any rank's original trace (found by a first, light pass over the files).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgspec
import polars as pl

from pipeaudit.errors import TraceError
from pipeaudit.timeline.model import Timeline
from pipeaudit.trace.source import read_bytes
from pipeaudit.trace.timestamps import raw_to_ns


class _TsOnly(msgspec.Struct):
    ts: msgspec.Raw = msgspec.Raw(b"")
    ph: Any = None


class _TsFile(msgspec.Struct):
    traceEvents: list[_TsOnly]
    baseTimeNanoseconds: Any = None


class _RawFile(msgspec.Struct):
    traceEvents: list[dict[str, msgspec.Raw]]
    baseTimeNanoseconds: Any = None


_NOT_IDS = {b'"C"', b'"M"'}


def _base(value: Any) -> int:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return 0


def _decode(path: str, typ: type) -> Any:
    data, _size, _gz = read_bytes(path)  # type: ignore[arg-type]
    try:
        return msgspec.json.decode(data, type=typ)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise TraceError(path, f"cannot merge this trace: {exc}") from None


def original_origin(tl: Timeline) -> int | None:
    """The earliest ``ts`` (absolute ns) of any non-metadata event in the ranks' files."""
    best: int | None = None
    for rt in tl.ranks:
        f = _decode(rt.path, _TsFile)
        raws = [e.ts for e in f.traceEvents if len(e.ts) and e.ph != "M"]
        if not raws:
            continue
        ns, _ = raw_to_ns(raws)
        lo = ns.min()
        if lo is not None:
            lo = int(lo) + _base(f.baseTimeNanoseconds)
            best = lo if best is None else min(best, lo)
    return best


def _ts_texts(ns: pl.Series) -> list[bytes | None]:
    """Exact µs text (three decimals) of each ns value; None where the value is null."""
    sign = pl.when(ns < 0).then(pl.lit("-")).otherwise(pl.lit(""))
    a = ns.abs()
    text = pl.select(
        pl.concat_str([sign, (a // 1000).cast(pl.Utf8), pl.lit("."),
                       (a % 1000).cast(pl.Utf8).str.zfill(3)])
    ).to_series()
    return [None if t is None else t.encode() for t in text.to_list()]


def original_events(tl: Timeline, *, origin_ns: int, first_pid: int, sort_base: int = 100,
                    counts: dict[str, int] | None = None) -> Iterator[bytes]:
    """Every rank's original events as encoded JSON objects (bytes), rank by rank, followed
    by each rank's process metadata. ``counts["original"]`` counts the original events
    written (each ``process_sort_index`` is replaced, not written)."""
    counts = counts if counts is not None else {}
    counts.setdefault("original", 0)
    next_pid = first_pid
    next_id = 1
    enc = msgspec.json.Encoder()
    for rt in sorted(tl.ranks, key=lambda r: r.rank):
        f = _decode(rt.path, _RawFile)
        base = _base(f.baseTimeNanoseconds)
        events = f.traceEvents
        del f
        with_ts = [i for i, e in enumerate(events) if "ts" in e]
        ns, _ = raw_to_ns([events[i]["ts"] for i in with_ts])
        ts_of = dict(zip(with_ts, _ts_texts(ns + (base - origin_ns))))
        pids: dict[bytes, int] = {}
        ids: dict[bytes, int] = {}
        named: set[int] = set()
        for i, e in enumerate(events):
            ph = bytes(e.get("ph", b'""'))
            key = bytes(e.get("pid", b"null"))
            pid = pids.get(key)
            if pid is None:
                pid = pids[key] = next_pid
                next_pid += 1
            out: dict[str, Any] = dict(e)
            out["pid"] = pid
            if ph == b'"M"':
                name = msgspec.json.decode(e.get("name", b'""'))
                if name == "process_sort_index":
                    continue  # replaced below, so that each rank's processes stay together
                if name == "process_name":
                    args = msgspec.json.decode(e.get("args", b"{}"))
                    orig = args.get("name", "") if isinstance(args, dict) else ""
                    out["args"] = {"name": f"rank {rt.rank} · {orig}"}
                    named.add(pid)
                out.pop("ts", None)
            else:
                t = ts_of.get(i)
                if t is not None:
                    out["ts"] = msgspec.Raw(t)
                if ph not in _NOT_IDS:
                    for k in ("id", "bind_id"):
                        if k in e:
                            raw = bytes(e[k])
                            new = ids.get(raw)
                            if new is None:
                                new = ids[raw] = next_id
                                next_id += 1
                            out[k] = new
            counts["original"] += 1
            yield enc.encode(out)
        for j, (key, pid) in enumerate(pids.items()):
            if pid not in named:
                orig = key.decode(errors="replace").strip('"')
                orig = f"pid {orig}" if orig not in ("", "null") else "(no pid)"
                yield enc.encode({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                                  "args": {"name": f"rank {rt.rank} · {orig}"}})
            yield enc.encode({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                              "args": {"sort_index": rt.rank * sort_base + 1 + j}})
        del events
