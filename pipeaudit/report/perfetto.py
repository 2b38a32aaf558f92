"""A run as a Chrome-trace (JSON object format) file that opens in ui.perfetto.dev.

Layout: one process per rank (``pid`` = rank, named ``rank N``), and in it one thread per
stage (``stage S``) holding the F/B/I/W slices named ``F3 (stage 1)``, each with the parts of
its span where it computes nothing (at least 20 µs and 5% of the span: waiting on a recv, a
send or the host) as nested ``waiting`` slices; with ``with_ideal``
a ``stage S · replay ideal`` thread under each stage; a ``bubble`` thread with the intervals
of each step window where the rank computes nothing; counter tracks ``memory Total
Allocated`` (bytes, from ``[memory]`` samples) and ``in-flight microbatches stage S``. Flow
arrows join F of stage s to F of stage s+1 and B/I of stage s+1 to B/I of stage s when the
two run on different ranks (the send -> recv of activations and gradients).

Only documented Trace Event Format fields are written: ph, name, cat, ts, dur, pid, tid,
args, id, bp, s (not used) and cname. ``ts`` is microseconds from the run's start
(:func:`pipeaudit.report.series.run_origin`) with ns precision; the run's start in ns since
the epoch is in ``otherData.origin_ns``.

Colours: ``cname`` takes catapult's reserved colour names (the legacy chrome://tracing viewer
uses them). Perfetto ignores ``cname`` on purpose and colours a slice by its name with the
digits removed, so every "F (stage)" slice shares one colour and every "B (stage)" another:
colour by kind holds there too.

Perfetto drops a slice that overlaps the previous one on its track without nesting in it,
and its µs-to-ns conversion can turn two back-to-back slices into a 1 ns overlap; a slice
that ends within 2 ns of the next one's start on the same track is therefore written ending
2 ns before it (its ``args`` keep the exact times).
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import msgspec
import polars as pl

from pipeaudit import __version__
from pipeaudit.outfiles import atomic_path
from pipeaudit.report.action_parts import coarse, compute_parts, waiting_parts
from pipeaudit.report.series import (
    bubble_intervals,
    device_label,
    ideal_actions,
    inflight_series,
    memory_series,
    run_origin,
    step_windows,
)
from pipeaudit.timeline.model import Timeline

#: Catapult reserved colour names per action kind (legacy viewer); Perfetto colours by name.
KIND_CNAME = {"F": "rail_response", "B": "rail_load", "I": "good", "W": "rail_idle"}
BUBBLE_CNAME = "grey"
WAIT_CNAME = "grey"
#: shortest wait inside an action written as a ``waiting`` slice: 20 us and 5% of the
#: action's span (the host's gaps between an action's ops are shorter)
MIN_WAIT_NS = 20_000
MIN_WAIT_SHARE = 0.05
KIND_WORD = {"F": "forward", "B": "backward", "I": "backward (input grad)", "W": "backward (weight grad)"}

#: Chrome JSON event fields that pipeaudit writes (a subset of the documented ones).
DOCUMENTED_FIELDS = frozenset({"ph", "name", "cat", "ts", "dur", "pid", "tid", "args", "id",
                               "bp", "s", "cname"})

STAGE_TID = 1
IDEAL_TID = 1001
BUBBLE_TID = 2001


@dataclass
class ExportSummary:
    """What an export wrote (for the CLI's one-line report and for tests)."""

    path: str
    ranks: int = 0
    slices: int = 0
    ideal_slices: int = 0
    wait_slices: int = 0
    bubble_slices: int = 0
    flows: int = 0
    counter_events: int = 0
    original_events: int = 0
    events: int = 0
    notes: list[str] = field(default_factory=list)


def _us(ns: int | float, origin: int) -> float:
    return round((ns - origin) / 1000.0, 3)


def _dur_us(start: int, end: int) -> float:
    return round(max(end - start, 0) / 1000.0, 3)


def _separate(rows: list[tuple[int, int, Any]]) -> list[tuple[int, int, Any]]:
    """Sort one track's (start, end, payload) rows and end each one >= 2 ns before the next."""
    rows = sorted(rows, key=lambda r: (r[0], r[1]))
    out = []
    for i, (s, e, p) in enumerate(rows):
        if i + 1 < len(rows):
            nxt = rows[i + 1][0]
            if e > nxt - 2:
                e = max(s, nxt - 2)
        out.append((s, e, p))
    return out


def _meta(pid: int, tid: int, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"ph": "M", "name": name, "pid": pid, "tid": tid, "args": args}


def pipeline_events(tl: Timeline, *, origin_ns: int, with_ideal: bool = False,
                    summary: ExportSummary | None = None, sort_base: int = 1,
                    label: str = "rank {rank}") -> Iterator[dict[str, Any]]:
    """The pipeline tracks of ``tl`` as Chrome-trace events (dicts), one process per rank.

    ``sort_base`` multiplies the rank in ``process_sort_index`` (room for other processes of
    the same rank between them); ``label`` names each rank's process.
    """
    summary = summary if summary is not None else ExportSummary(path="")
    windows = step_windows(tl)
    acts = tl.actions
    placement = tl.placement
    stages_of: dict[int, list[int]] = {}
    for s, r in placement.items():
        stages_of.setdefault(r, []).append(s)
    tid_of: dict[int, int] = {}
    for r, ss in stages_of.items():
        for i, s in enumerate(sorted(ss)):
            tid_of[s] = STAGE_TID + i

    # ---- metadata: processes and threads
    for rt in tl.ranks:
        r = rt.rank
        summary.ranks += 1
        yield _meta(r, 0, "process_name", {"name": label.format(rank=r)})
        yield _meta(r, 0, "process_sort_index", {"sort_index": r * sort_base})
        for i, s in enumerate(sorted(stages_of.get(r, []))):
            yield _meta(r, tid_of[s], "thread_name", {"name": f"stage {s}"})
            yield _meta(r, tid_of[s], "thread_sort_index", {"sort_index": 2 * i})
            if with_ideal:
                yield _meta(r, IDEAL_TID + i, "thread_name", {"name": f"stage {s} · replay ideal"})
                yield _meta(r, IDEAL_TID + i, "thread_sort_index", {"sort_index": 2 * i + 1})
        if r in stages_of:
            yield _meta(r, BUBBLE_TID, "thread_name", {"name": "bubble"})
            yield _meta(r, BUBBLE_TID, "thread_sort_index", {"sort_index": 10_000})

    # ---- measured actions, one track per stage
    where: dict[tuple[int, int, str, int], tuple[int, int, int, int]] = {}  # -> pid, tid, start, end
    cols = ["rank", "stage", "kind", "microbatch", "step", "profiler_step", "start", "end",
            "compute_ns", "compute_start", "compute_end"]
    parts = compute_parts(tl)
    for s in sorted(placement):
        rows = [(int(r[6]), int(r[7]), r) for r in acts.filter(pl.col("stage") == s).select(cols).iter_rows()]
        for start, end, row in _separate(rows):
            rank, stage, kind, mb, step, pstep, s0, e0, cns, cs, ce = row
            where[(int(step), int(stage), str(kind), int(mb))] = (int(rank), tid_of[stage], start, end)
            summary.slices += 1
            yield {
                "ph": "X", "name": f"{kind}{mb} (stage {stage})", "cat": str(kind),
                "ts": _us(start, origin_ns), "dur": _dur_us(start, end), "pid": int(rank),
                "tid": tid_of[stage], "cname": KIND_CNAME.get(kind, "generic_work"),
                "args": {
                    "action": f"{stage}{kind}{mb}", "kind": KIND_WORD.get(kind, kind),
                    "stage": int(stage), "microbatch": int(mb), "step": int(step),
                    "profiler_step": None if pstep is None else int(pstep),
                    "compute_us": round(cns / 1000.0, 3), "span_us": round((e0 - s0) / 1000.0, 3),
                    "compute_start_us": _us(cs, origin_ns), "compute_end_us": _us(ce, origin_ns),
                },
            }
            # where the action waits inside its span, nested in its slice
            shortest = max(MIN_WAIT_NS, int(MIN_WAIT_SHARE * (end - start)))
            busy = coarse(parts.get((stage, kind, mb, step), [(cs, ce)]), shortest)
            for w0, w1 in waiting_parts(start, end, busy, shortest):
                summary.wait_slices += 1
                yield {"ph": "X", "name": "waiting", "cat": "wait", "ts": _us(w0, origin_ns),
                       "dur": _dur_us(w0, w1), "pid": int(rank), "tid": tid_of[stage],
                       "cname": WAIT_CNAME,
                       "args": {"action": f"{stage}{kind}{mb}", "step": int(step),
                                "dur_us": round((w1 - w0) / 1000.0, 3)}}

    # ---- flows: send -> recv between ranks
    yield from _flows(where, placement, origin_ns, summary)

    # ---- bubble intervals per rank
    for rank, rows in bubble_intervals(tl, windows).items():
        lo_hi = {k: w for k, w in windows.items()}
        for start, end, k in _separate([(s, e, k) for k, s, e in rows]):
            w0, w1 = lo_hi[k]
            summary.bubble_slices += 1
            yield {"ph": "X", "name": "bubble", "cat": "bubble", "ts": _us(start, origin_ns),
                   "dur": _dur_us(start, end), "pid": rank, "tid": BUBBLE_TID,
                   "cname": BUBBLE_CNAME,
                   "args": {"step": k, "dur_us": round((end - start) / 1000.0, 3),
                            "step_window_us": round((w1 - w0) / 1000.0, 3)}}

    # ---- replay ideal, aligned at each step window's start
    if with_ideal:
        for k, (lo, _hi) in sorted(windows.items()):
            ideal = ideal_actions(tl, k, lo)
            if ideal is None:
                summary.notes.append(f"step {k}: no replay ideal (stages not 0..S-1 or order not replayable)")
                continue
            by_stage: dict[int, list] = {}
            for a in ideal:
                by_stage.setdefault(a.stage, []).append((a.start, a.end, a))
            for s, rows in by_stage.items():
                ideal_tid = IDEAL_TID + (tid_of[s] - STAGE_TID)
                for start, end, a in _separate(rows):
                    summary.ideal_slices += 1
                    yield {"ph": "X", "name": f"{a.kind}{a.microbatch} (stage {s})", "cat": "ideal",
                           "ts": _us(start, origin_ns), "dur": _dur_us(start, end), "pid": a.rank,
                           "tid": ideal_tid, "cname": KIND_CNAME.get(a.kind, "generic_work"),
                           "args": {"action": f"{s}{a.kind}{a.microbatch}", "step": k,
                                    "replay_ideal": True,
                                    "compute_us": round((a.end - a.start) / 1000.0, 3),
                                    "offset_in_step_us": round((a.start - lo) / 1000.0, 3)}}

    # ---- counters: in-flight microbatches per stage, memory per rank
    for s, series in inflight_series(tl).items():
        r = placement[s]
        for t, n in series:
            summary.counter_events += 1
            yield {"ph": "C", "name": "in-flight microbatches", "ts": _us(t, origin_ns), "pid": r,
                   "tid": tid_of[s], "args": {f"stage {s}": n}}
    for r, devs in memory_series(tl).items():
        for dev, (ts, vals) in devs.items():
            name = "memory" if len(devs) == 1 else f"memory {device_label(dev)}"
            for t, v in zip(ts.tolist(), vals.tolist()):
                summary.counter_events += 1
                yield {"ph": "C", "name": name, "ts": _us(t, origin_ns), "pid": r, "tid": 0,
                       "args": {"Total Allocated": v}}


def _flows(where, placement, origin_ns, summary) -> Iterator[dict[str, Any]]:
    num_stages = len(placement)
    flow_id = 0
    for (step, s, kind, mb), (rank, tid, start, end) in sorted(where.items()):
        if kind == "F" and s > 0:
            src_keys, what = [(step, s - 1, "F", mb)], "activations"
        elif kind in ("B", "I") and s < num_stages - 1:
            src_keys, what = [(step, s + 1, "B", mb), (step, s + 1, "I", mb)], "gradients"
        else:
            continue
        src = next((where[k] for k in src_keys if k in where), None)
        if src is None or src[0] == rank:
            continue
        s_rank, s_tid, s_start, s_end = src
        if s_end - s_start < 2 or end - start < 2:
            continue
        flow_id += 1
        summary.flows += 1
        eps_src = min(1000, (s_end - s_start) // 2)
        eps_dst = min(1000, (end - start) // 2)
        name = f"{what} mb {mb}: stage {src_keys[0][1]} -> {s}"
        yield {"ph": "s", "name": name, "cat": "pipeline", "id": flow_id,
               "ts": _us(s_end - eps_src, origin_ns), "pid": s_rank, "tid": s_tid}
        yield {"ph": "f", "bp": "e", "name": name, "cat": "pipeline", "id": flow_id,
               "ts": _us(start + eps_dst, origin_ns), "pid": rank, "tid": tid}


class _Batched:
    """Collects many small writes into ~1 MiB ones (a gzip stream pays per write call)."""

    def __init__(self, fh: Any, limit: int = 1 << 20) -> None:
        self.fh, self.limit, self.parts, self.size = fh, limit, [], 0

    def write(self, data: bytes) -> None:
        self.parts.append(data)
        self.size += len(data)
        if self.size >= self.limit:
            self.flush()

    def flush(self) -> None:
        if self.parts:
            self.fh.write(b"".join(self.parts))
            self.parts, self.size = [], 0

    def __enter__(self) -> "_Batched":
        return self

    def __exit__(self, *exc: Any) -> None:
        if exc[0] is None:
            self.flush()


def _replica_events(tl: Timeline, *, origin_ns: int, with_ideal: bool, summary: ExportSummary,
                    sort_base: int, label: str) -> Iterator[dict[str, Any]]:
    """The pipeline tracks of every replica of the job, each on its own step windows; ranks
    are named with their replica and sorted replica by replica."""
    layout = tl.layout
    if layout is None or len(layout.replicas) < 2:
        yield from pipeline_events(tl, origin_ns=origin_ns, with_ideal=with_ideal, summary=summary,
                                   sort_base=sort_base, label=label)
        return
    order = {r: i for i, r in enumerate(r for d in range(len(layout.replicas))
                                        for r in layout.replica_ranks(d))}
    for d in range(len(layout.replicas)):
        for ev in pipeline_events(tl.replica(d), origin_ns=origin_ns, with_ideal=with_ideal,
                                  summary=summary, sort_base=sort_base,
                                  label=f"pipeline {d} · " + label):
            if ev.get("name") == "process_sort_index":
                ev = {**ev, "args": {"sort_index": order.get(ev["pid"], ev["pid"]) * sort_base}}
            yield ev


def write_perfetto(tl: Timeline, path: str, *, with_ideal: bool = False,
                   merge_original: bool = False) -> ExportSummary:
    """Write the run's Chrome trace to ``path`` (gzip when it ends in ``.gz``), atomically.

    ``merge_original`` also streams every rank's original trace events into the file, one
    rank at a time (pids remapped so ranks do not collide; see :mod:`pipeaudit.report.merge`).
    """
    summary = ExportSummary(path=path)
    origin = run_origin(tl)
    if merge_original:
        from pipeaudit.report.merge import original_origin

        original = original_origin(tl)  # None: the files hold no timed event
        if original is not None:
            origin = min(origin, original)
    other = {"tool": f"pipeaudit {__version__}", "origin_ns": origin,
             "inputs": [rt.path for rt in tl.ranks],
             "note": "ts are microseconds from origin_ns (ns since the Unix epoch)"}
    enc = msgspec.json.Encoder()
    with atomic_path(path, what="the trace") as tmp:
        opener = gzip.open(tmp, "wb", compresslevel=6) if path.endswith(".gz") else open(tmp, "wb")
        with opener as raw_fh, _Batched(raw_fh) as fh:
            fh.write(b'{"displayTimeUnit":"ms","otherData":' + enc.encode(other) + b',"traceEvents":[\n')
            first = True
            label = "rank {rank} · pipeline" if merge_original else "rank {rank}"
            sort_base = 100 if merge_original else 1
            for ev in _replica_events(tl, origin_ns=origin, with_ideal=with_ideal,
                                      summary=summary, sort_base=sort_base, label=label):
                fh.write(enc.encode(ev) if first else b",\n" + enc.encode(ev))
                first = False
                summary.events += 1
            if merge_original:
                from pipeaudit.report.merge import original_events

                counts: dict[str, int] = {}
                for raw in original_events(tl, origin_ns=origin, first_pid=max(
                        (rt.rank for rt in tl.ranks), default=-1) + 1, sort_base=sort_base,
                        counts=counts):
                    fh.write(raw if first else b",\n" + raw)
                    first = False
                    summary.events += 1
                summary.original_events = counts.get("original", 0)
            fh.write(b"\n]}\n")
    return summary
