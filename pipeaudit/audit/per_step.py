"""The per-step series of the audit (:class:`~pipeaudit.audit.result.StepSeries`).

Built from what the replica's audit already measured (step windows, bubbles, each rank's
step split, in-flight peaks), so every reader (the gate, ``diff``, ``watch``, the training
handler, the API) sees one definition of each value. A job of several replicas combines its
replicas' series: a step lasts as long as its slowest replica, the bubble is the mean over
every rank, a stage's compute the mean over the replicas that run it, its in-flight peak the
largest.
"""

from __future__ import annotations

from statistics import median
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from pipeaudit.actions import KINDS
from pipeaudit.audit.result import StepMetrics, StepSeries

if TYPE_CHECKING:
    from pipeaudit.audit.breakdown import StepShare
    from pipeaudit.timeline.model import Timeline

US = 1000.0  # ns per µs


def replica_series(tl: Timeline, rep_tl: Timeline, rows: list[StepMetrics],
                   bubbles: dict[int, dict[int, float]], shares: dict[int, dict[int, StepShare]],
                   peaks: dict[int, dict[int, int]]) -> StepSeries | None:
    """The series of one replica: ``tl`` its ranks present, ``rep_tl`` one rank per stage
    position, ``rows`` its audited steps, ``bubbles`` step -> rank -> bubble, ``shares``
    rank -> step -> its step split, ``peaks`` step -> stage -> in-flight peak."""
    if not rows:
        return None
    steps = [r.step for r in rows]
    stage_compute = _stage_compute(rep_tl, steps)
    ranks = [rt.rank for rt in tl.ranks]
    rank_exposed = {r: [exposed_share(shares.get(r, {}).get(k)) for k in steps] for r in ranks}
    return StepSeries(
        steps=steps,
        step_time_us=[r.step_time_us for r in rows],
        bubble=[r.bubble for r in rows],
        exposed_comm=_mean_by_step(rank_exposed, len(steps)),
        imbalance=imbalance_by_step(stage_compute, len(steps)),
        rank_bubble={r: [float(bubbles[k].get(r, 1.0)) for k in steps] for r in ranks},
        rank_exposed_comm=rank_exposed,
        stage_compute_us=stage_compute,
        stage_peak_inflight={s: [peaks.get(k, {}).get(s, 0) for k in steps]
                             for s in stage_compute},
        rank_peak_memory=_memory(tl, [int(round(r.start_us * US)) for r in rows]),
    )


def exposed_share(share: StepShare | None) -> float:
    """A step's exposed communication (point-to-point transfer and data-parallel collectives
    that no compute hides) as a share of its span; 0.0 for a step the rank did not compute in."""
    if share is None or share.span_us <= 0:
        return 0.0
    return (share.exposed_p2p_us + share.exposed_dp_us) / share.span_us


def imbalance_by_step(stage_compute: dict[int, dict[str, list[float]]], n: int) -> list[float]:
    """Per step, max stage compute / median stage compute (1.0 when the median is 0)."""
    totals = [[sum(x) for x in zip(*by_kind.values())] for by_kind in stage_compute.values()]
    out = []
    for i in range(n):
        per_stage = [t[i] for t in totals]
        med = median(per_stage) if per_stage else 0.0
        out.append(max(per_stage) / med if med > 0 else 1.0)
    return out


def combine_series(parts: list[StepSeries]) -> StepSeries:
    """The job's series from its replicas' (the steps all of them audited)."""
    steps = sorted(set.intersection(*(set(p.steps) for p in parts)))

    def at(p: StepSeries, values: list) -> list:
        return [values[p.steps.index(k)] for k in steps]

    n = len(steps)
    rank_bubble = {r: at(p, v) for p in parts for r, v in p.rank_bubble.items()}
    rank_exposed = {r: at(p, v) for p in parts for r, v in p.rank_exposed_comm.items()}
    stages = sorted({st for p in parts for st in p.stage_compute_us})
    stage_compute = {st: {k: [float(np.mean(col)) for col in zip(*(at(p, p.stage_compute_us[st][k])
                                                                    for p in parts
                                                                    if st in p.stage_compute_us))]
                          for k in KINDS} for st in stages}
    return StepSeries(
        steps=steps,
        step_time_us=[max(at(p, p.step_time_us)[i] for p in parts) for i in range(n)],
        bubble=_mean_by_step(rank_bubble, n),
        exposed_comm=_mean_by_step(rank_exposed, n),
        imbalance=imbalance_by_step(stage_compute, n), rank_bubble=rank_bubble,
        rank_exposed_comm=rank_exposed, stage_compute_us=stage_compute,
        stage_peak_inflight={st: [max(vals) for vals in zip(*(at(p, p.stage_peak_inflight[st])
                                                              for p in parts
                                                              if st in p.stage_peak_inflight))]
                             for st in stages},
        rank_peak_memory={r: at(p, v) for p in parts for r, v in p.rank_peak_memory.items()},
    )


def _mean_by_step(by_rank: dict[int, list[float]], n: int) -> list[float]:
    return [float(np.mean([v[i] for v in by_rank.values()])) if by_rank else 0.0
            for i in range(n)]


def _stage_compute(tl: Timeline, steps: list[int]) -> dict[int, dict[str, list[float]]]:
    """Stage -> kind -> per step, the compute of its actions (µs)."""
    sums = (tl.actions.group_by("stage", "kind", "step").agg(pl.col("compute_ns").sum())
            .iter_rows())
    table: dict[tuple[int, str, int], float] = {(int(s), str(k), int(st)): float(c) / US
                                                for s, k, st, c in sums}
    stages = sorted({s for s, _, _ in table})
    return {s: {k: [table.get((s, k, st), 0.0) for st in steps] for k in KINDS} for s in stages}


def _memory(tl: Timeline, starts_ns: list[int]) -> dict[int, list[int | None]]:
    """Rank -> per step, the peak ``Total Allocated`` from the step's start to the next's."""
    starts = np.array(starts_ns, dtype=np.int64)
    out: dict[int, list[int | None]] = {}
    for rt in tl.ranks:
        mem = rt.memory.filter(pl.col("total_allocated").is_not_null())  # a bad value is none
        if mem.height == 0:
            continue
        ts = mem["ts"].to_numpy()
        val = mem["total_allocated"].to_numpy()
        idx = np.clip(np.searchsorted(starts, ts, side="right") - 1, 0, len(starts) - 1)
        peaks: list[int | None] = []
        for i in range(len(starts)):
            sel = val[idx == i]
            peaks.append(int(sel.max()) if sel.size else None)
        out[rt.rank] = peaks
    return out
