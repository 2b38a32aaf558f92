"""Per-step values of the gated metrics, measured on a timeline.

The gate compares medians of per-step values and needs each step's value to
judge noise, so a baseline stores these series next to the audit document.
Every list holds one value per audited step, in step order.

- ``step_time_us``: |W_k| (DESIGN.md step window).
- ``bubble``: pipeline bubble of step k (mean over ranks); ``rank_bubble`` per rank.
- ``exposed_comm``: per rank, communication inside W_k that runs while the rank
  does not compute (action compute and other compute), as a share of |W_k|;
  the pipeline value is the mean over ranks.
- ``stage_compute_us``: per stage and kind, the compute time of its actions in step k.
- ``imbalance``: max stage compute / median stage compute in step k.
- ``stage_peak_inflight``: per stage, peak (F done - B or I done) in step k's order.
- ``rank_peak_memory``: per rank with ``[memory]`` samples, the max ``Total Allocated``
  between the start of W_k and the start of W_{k+1} (samples before W_0 count for step 0).
"""

from __future__ import annotations

from collections import defaultdict
from statistics import median

import msgspec
import numpy as np
import polars as pl

from pipeaudit.actions import KINDS, Action
from pipeaudit.audit.windows import windows_and_bubbles
from pipeaudit.timeline import intervals as iv
from pipeaudit.timeline.model import Timeline

US = 1000.0  # ns per µs


class StepSeries(msgspec.Struct, kw_only=True):
    """Per-step series of every gated metric (one entry per audited step)."""

    steps: list[int]
    step_time_us: list[float]
    bubble: list[float]
    exposed_comm: list[float]
    imbalance: list[float]
    rank_bubble: dict[int, list[float]]
    rank_exposed_comm: dict[int, list[float]]
    stage_compute_us: dict[int, dict[str, list[float]]]
    stage_peak_inflight: dict[int, list[int]]
    rank_peak_memory: dict[int, list[int | None]] = {}

    def stage_total_us(self, stage: int) -> list[float]:
        """Per step, a stage's compute over all kinds."""
        by_kind = self.stage_compute_us[stage]
        return [sum(v) for v in zip(*by_kind.values())] if by_kind else []


def step_series(tl: Timeline) -> StepSeries | None:
    """Measure the per-step series of ``tl``; None when it holds no pipeline step.

    A job of several pipeline replicas is measured replica by replica, each on its own step
    windows, then combined: a step lasts as long as its slowest replica, the bubble is the
    mean over every rank, a stage's compute the mean over the replicas that run it, its
    in-flight peak the largest."""
    layout = tl.layout
    if layout is None or len(layout.replicas) < 2:
        return _replica_series(tl)
    parts = [x for x in (_replica_series(tl.replica(d)) for d in range(len(layout.replicas)))
             if x is not None]
    return _combine(parts) if parts else None


def _combine(parts: list[StepSeries]) -> StepSeries:
    steps = sorted(set.intersection(*(set(p.steps) for p in parts)))

    def at(p: StepSeries, values: list) -> list:
        return [values[p.steps.index(k)] for k in steps]

    rank_bubble = {r: at(p, v) for p in parts for r, v in p.rank_bubble.items()}
    rank_exposed = {r: at(p, v) for p in parts for r, v in p.rank_exposed_comm.items()}
    stages = sorted({st for p in parts for st in p.stage_compute_us})
    stage_compute = {st: {k: [float(np.mean(col)) for col in zip(*(at(p, p.stage_compute_us[st][k])
                                                                    for p in parts
                                                                    if st in p.stage_compute_us))]
                          for k in KINDS} for st in stages}
    totals = [[sum(x) for x in zip(*by.values())] for by in stage_compute.values()]
    imbalance = []
    for i in range(len(steps)):
        per_stage = [t[i] for t in totals]
        med = median(per_stage) if per_stage else 0.0
        imbalance.append(max(per_stage) / med if med > 0 else 1.0)
    return StepSeries(
        steps=steps,
        step_time_us=[max(at(p, p.step_time_us)[i] for p in parts) for i in range(len(steps))],
        bubble=[float(np.mean([v[i] for v in rank_bubble.values()])) for i in range(len(steps))],
        exposed_comm=[float(np.mean([v[i] for v in rank_exposed.values()])) for i in range(len(steps))],
        imbalance=imbalance, rank_bubble=rank_bubble, rank_exposed_comm=rank_exposed,
        stage_compute_us=stage_compute,
        stage_peak_inflight={st: [max(vals) for vals in zip(*(at(p, p.stage_peak_inflight[st])
                                                              for p in parts
                                                              if st in p.stage_peak_inflight))]
                             for st in stages},
        rank_peak_memory={r: at(p, v) for p in parts for r, v in p.rank_peak_memory.items()},
    )


def _replica_series(tl: Timeline) -> StepSeries | None:
    """:func:`step_series` of one pipeline (its ranks present)."""
    wb = windows_and_bubbles(tl.ranks, tl.steps) if tl.actions.height else {}
    if not wb:
        return None
    steps = sorted(wb)
    windows = [wb[k][0] for k in steps]
    rank_bubble = {rt.rank: [float(wb[k][1][rt.rank]) for k in steps] for rt in tl.ranks}
    rank_exposed = {rt.rank: [_exposed_share(rt, wb[k][0], wb[k][2][rt.rank]) for k in steps]
                    for rt in tl.ranks}
    stage_compute = _stage_compute(tl, steps)
    totals = {s: [sum(x) for x in zip(*by_kind.values())] for s, by_kind in stage_compute.items()}
    imbalance = []
    for i in range(len(steps)):
        per_stage = [t[i] for t in totals.values()]
        med = median(per_stage) if per_stage else 0.0
        imbalance.append(max(per_stage) / med if med > 0 else 1.0)
    return StepSeries(
        steps=steps,
        step_time_us=[(w[1] - w[0]) / US for w in windows],
        bubble=[float(np.mean(list(wb[k][1].values()))) for k in steps],
        exposed_comm=[float(np.mean([v[i] for v in rank_exposed.values()])) for i in range(len(steps))],
        imbalance=imbalance,
        rank_bubble=rank_bubble,
        rank_exposed_comm=rank_exposed,
        stage_compute_us=stage_compute,
        stage_peak_inflight=_inflight(tl, steps, sorted(stage_compute)),
        rank_peak_memory=_memory(tl, windows),
    )


def _exposed_share(rt, window: tuple[int, int], compute: iv.Intervals) -> float:
    lo, hi = window
    if hi <= lo:
        return 0.0
    comm = iv.clip(rt.comm, lo, hi)
    busy = iv.union(iv.clip(compute, lo, hi), iv.clip(rt.other_compute, lo, hi))
    return iv.total(iv.subtract(comm, busy)) / (hi - lo)


def _stage_compute(tl: Timeline, steps: list[int]) -> dict[int, dict[str, list[float]]]:
    sums = (tl.actions.group_by("stage", "kind", "step").agg(pl.col("compute_ns").sum())
            .iter_rows())
    table: dict[tuple[int, str, int], float] = {(int(s), str(k), int(st)): float(c) / US
                                                for s, k, st, c in sums}
    stages = sorted({s for s, _, _ in table})
    return {s: {k: [table.get((s, k, st), 0.0) for st in steps] for k in KINDS} for s in stages}


def _inflight(tl: Timeline, steps: list[int], stages: list[int]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {s: [] for s in stages}
    for k in steps:
        live: dict[int, int] = defaultdict(int)
        peak: dict[int, int] = defaultdict(int)
        for order in tl.orders(k).values():
            for a in order:
                _count(a, live, peak)
        for s in stages:
            out[s].append(peak[s])
    return out


def _count(a: Action, live: dict[int, int], peak: dict[int, int]) -> None:
    if a.kind == "F":
        live[a.stage] += 1
        peak[a.stage] = max(peak[a.stage], live[a.stage])
    elif a.kind in ("B", "I"):
        live[a.stage] -= 1


def _memory(tl: Timeline, windows: list[tuple[int, int]]) -> dict[int, list[int | None]]:
    starts = np.array([w[0] for w in windows], dtype=np.int64)
    out: dict[int, list[int | None]] = {}
    for rt in tl.ranks:
        if rt.memory.height == 0:
            continue
        ts = rt.memory["ts"].to_numpy()
        val = rt.memory["total_allocated"].to_numpy()
        idx = np.clip(np.searchsorted(starts, ts, side="right") - 1, 0, len(windows) - 1)
        peaks: list[int | None] = []
        for i in range(len(windows)):
            sel = val[idx == i]
            peaks.append(int(sel.max()) if sel.size else None)
        out[rt.rank] = peaks
    return out
