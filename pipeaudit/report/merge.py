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

The files are read by the trace layer's own pipeline (:mod:`pipeaudit.trace.source`,
:mod:`pipeaudit.trace.document`, :func:`pipeaudit.trace.tokenizer.decode_events`): the same
byte reader, limits and messages as the analysis, with the events decoded as raw JSON.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import polars as pl

from pipeaudit.timeline.model import Timeline
from pipeaudit.trace.document import Batch, Document
from pipeaudit.trace.header import parse_base_ns
from pipeaudit.trace.options import ReadOptions
from pipeaudit.trace.source import TraceBytes
from pipeaudit.trace.timestamps import raw_to_ns
from pipeaudit.trace.tokenizer import decode_events, explain_events


class _TsOnly(msgspec.Struct):
    ts: msgspec.Raw = msgspec.Raw(b"")
    ph: Any = None


_NOT_IDS = {b'"C"', b'"M"'}
_BASE_KEY = "baseTimeNanoseconds"


class _Collect:
    """A batch target that keeps every event, decoded by ``decoder``."""

    def __init__(self, path: Path, decoder: msgspec.json.Decoder) -> None:
        self.path, self.decoder, self.events = path, decoder, []

    def decode(self, batch: Batch) -> int:
        events = decode_events(self.path, self.decoder, batch)
        self.events.extend(events)
        return len(events)

    def explain(self, batch: Batch):
        explain_events(self.path, self.decoder, batch)


def _read(path: str | Path, event_type: Any) -> tuple[list, int]:
    """(every event of the file as ``event_type``, its base time in ns)."""
    options = ReadOptions.for_budget(None)
    target = _Collect(Path(path), msgspec.json.Decoder(list[event_type]))
    members = Document(TraceBytes(path), target, batch_bytes=options.batch_bytes,
                       max_event_bytes=options.max_event_bytes, keep=frozenset({_BASE_KEY})).read()
    raw = members.get(_BASE_KEY)
    base = parse_base_ns(msgspec.json.decode(raw)) if raw is not None else 0
    return target.events, base or 0


def original_origin(tl: Timeline) -> int | None:
    """The earliest ``ts`` (absolute ns) of any non-metadata event in the ranks' files."""
    best: int | None = None
    for rt in tl.ranks:
        events, base = _read(rt.path, _TsOnly)
        raws = [e.ts for e in events if len(e.ts) and e.ph != "M"]
        if not raws:
            continue
        ns, _ = raw_to_ns(raws)
        lo = ns.min()
        if lo is not None:
            lo = int(lo) + base
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
        events, base = _read(rt.path, dict[str, msgspec.Raw])
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
