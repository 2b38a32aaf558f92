"""Timelines built in memory, for unit tests of the audit (no trace file, no decode).

``timeline(orders, ...)`` places every action with the same independent scheduler the trace
builders use (``builders.place``) and turns the placement straight into the
:class:`~pipeaudit.timeline.model.Timeline` the audit reads: one RankTimeline per rank, each
action's compute exactly its placed interval, steps back to back. ``truth_bubble`` is
the bubble (docs/metrics.md) of that placement, counted on a grid.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from .builders import place
from pipeaudit.timeline import intervals as iv
from pipeaudit.timeline.layout import Layout
from pipeaudit.timeline.model import Timeline
from pipeaudit.timeline.rank import ACTION_COLUMNS, RankTimeline

US = 1000  # ns


def _durations(dur):
    return dur or (lambda s, k, m: {"F": 1000, "B": 2000, "I": 1000, "W": 1000}[k])


def timeline(orders, *, placement=None, dur=None, latency=0, steps=1, step_gap=500,
             replicas: int = 1) -> Timeline:
    """The Timeline of ``orders`` (per rank, (stage, kind, mb) in execution order), ``steps``
    times, for ``replicas`` data-parallel copies (ranks of copy d are d*P .. d*P+P-1)."""
    P = len(orders)
    placement = placement or list(range(P))
    dur = _durations(dur)
    ranks = []
    for d in range(replicas):
        rows: dict[int, list[tuple]] = {r: [] for r in range(P)}
        t0 = 1000
        for step in range(steps):
            slots = place(orders, placement, dur, latency, lambda r: 0)
            for r, order in enumerate(orders):
                for s, k, m in order:
                    sl = slots[(s, k, m)]
                    a, b = (t0 + sl.start) * US, (t0 + sl.end) * US
                    rows[r].append((d * P + r, s, k, m, step, step, str(r), a, b, b - a, a, b,
                                    "annotation", a, b))
            t0 += max(sl.end for sl in slots.values()) + step_gap
        for r in range(P):
            ranks.append(_rank_timeline(d * P + r, rows[r], P * replicas))
    layout = Layout(P, replicas, 1, tuple(tuple((d * P + r,) for r in range(P))
                                          for d in range(replicas)), "built in memory", P * replicas)
    return Timeline(ranks=ranks, layout=layout, step_evidence="built in memory")


def _rank_timeline(rank: int, rows: list[tuple], world: int) -> RankTimeline:
    actions = pl.DataFrame(rows, schema=dict(zip(ACTION_COLUMNS, [
        pl.Int64, pl.Int64, pl.Utf8, pl.Int64, pl.Int64, pl.Int64, pl.Utf8, pl.Int64, pl.Int64,
        pl.Int64, pl.Int64, pl.Int64, pl.Utf8, pl.Int64, pl.Int64])), orient="row")
    compute = actions.with_row_index("action").select(
        pl.col("action").cast(pl.Int64), start="compute_start", end="compute_end")
    busy = iv.merge(compute["start"].to_numpy(), compute["end"].to_numpy())
    return RankTimeline(
        rank=rank, path=f"<memory:{rank}>", device_type="cpu", on_gpu=False, world_size=world,
        actions=actions, compute=compute, comm=iv.empty(), activity=busy, other_compute=iv.empty(),
        steps=pl.DataFrame(schema={"profiler_step": pl.Int64, "start": pl.Int64, "end": pl.Int64}),
        memory_peak={}, memory=pl.DataFrame(schema={"ts": pl.Int64, "total_allocated": pl.Int64,
                                                     "device_id": pl.Int64}),
        source="annotation")


def truth_bubble(tl: Timeline) -> dict[int, float]:
    """Per rank, the bubble (docs/metrics.md) in its replica's step windows, averaged over steps."""
    out: dict[int, list[float]] = {}
    for d in range(len(tl.layout.replicas)):
        members = set(tl.layout.replica_ranks(d))
        group = [rt for rt in tl.ranks if rt.rank in members]
        for k in sorted(set(group[0].actions["step"].to_list())):
            per = {rt.rank: rt.actions.filter(pl.col("step") == k) for rt in group}
            lo = min(int(a["compute_start"].min()) for a in per.values())
            hi = max(int(a["compute_end"].max()) for a in per.values())
            for r, a in per.items():
                grid = np.zeros((hi - lo) // US, dtype=bool)
                for s, e in a.select("compute_start", "compute_end").iter_rows():
                    grid[(s - lo) // US:(e - lo) // US] = True
                out.setdefault(r, []).append(1 - grid.sum() / grid.size)
    return {r: float(np.mean(v)) for r, v in out.items()}
