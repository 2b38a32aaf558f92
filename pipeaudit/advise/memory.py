"""Peak memory of a candidate schedule, from the measured run's ``[memory]`` events.

The model, per rank: ``peak = static + unit x rows_ratio x inflight_units(order)``.

- ``static`` is what the rank holds when no microbatch is in flight: the ``Total Allocated``
  at the end of its last action of a step (weights, gradients, optimizer state), the median
  over steps;
- a rank's activations per in-flight microbatch are split evenly over its chunks, so one
  (stage, microbatch) in flight holds 1/v of them; ``inflight_units`` is the most such units
  the rank's order holds at once (+1/v at a forward, -1/v where the microbatch's last
  backward piece of that stage runs: B, or W when the backward is split);
- ``unit`` is measured: (measured peak - static) / the measured order's inflight units;
- ``rows_ratio`` = M_measured / M_candidate: the same global batch in M microbatches, with
  activations linear in the rows of a microbatch.

Without ``[memory]`` events (``profile_memory=False``) there is no prediction: the advice
ranks on time only and says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median

import polars as pl

from pipeaudit.timeline.model import Timeline


def inflight_units(order: Sequence, chunks: int) -> float:
    """Most (stage, microbatch) activations held at once by one rank's ``order`` (actions with
    ``stage``, ``kind``, ``microbatch``), each 1/``chunks`` of the rank's per-microbatch share."""
    release: dict[tuple[int, int], str] = {}
    for a in order:
        if a.kind in ("B", "W"):
            release[(a.stage, a.microbatch)] = a.kind  # the last backward piece frees it
    held = peak = 0.0
    seen_b: set[tuple[int, int]] = set()
    for a in order:
        key = (a.stage, a.microbatch)
        if a.kind == "F":
            held += 1.0 / chunks
            peak = max(peak, held)
        elif a.kind == release.get(key) and key not in seen_b:
            seen_b.add(key)
            held -= 1.0 / chunks
    return peak


@dataclass(frozen=True)
class RankMemory:
    """What one rank's memory is made of (bytes)."""

    rank: int
    static: int
    peak: int
    unit: float  #: bytes per in-flight unit (a full microbatch on all the rank's chunks)


def rank_memory(tl: Timeline, measured_orders: dict[int, Sequence], chunks: int
                ) -> dict[int, RankMemory] | None:
    """Each rank's static memory, peak and activation unit; None without ``[memory]`` events."""
    out = {}
    for rt in tl.ranks:
        mem = rt.memory
        if mem.height == 0 or rt.rank not in measured_orders or rt.actions.height == 0:
            return None
        dev = mem.group_by("device_id").agg(pl.col("total_allocated").max()).sort(
            "total_allocated", descending=True)["device_id"][0]
        mem = mem.filter(pl.col("device_id") == dev).sort("ts")
        ends = rt.actions.group_by("step").agg(pl.col("end").max())["end"].to_list()
        ts = mem["ts"].to_numpy()
        alloc = mem["total_allocated"].to_numpy()
        statics = []
        for end in ends:
            i = int(ts.searchsorted(end, side="right")) - 1
            if i >= 0:
                statics.append(int(alloc[i]))
        if not statics:
            return None
        static = int(median(statics))
        peak = int(alloc.max())
        units = inflight_units(measured_orders[rt.rank], chunks)
        unit = (peak - static) / units if units > 0 else 0.0
        out[rt.rank] = RankMemory(rt.rank, static, peak, max(unit, 0.0))
    return out


def predicted_peaks(memory: dict[int, RankMemory], orders: dict[int, Sequence], chunks: int,
                    rows_ratio: float) -> dict[int, int]:
    """Each rank's predicted peak for a candidate's per-rank ``orders``."""
    return {r: int(m.static + m.unit * rows_ratio * inflight_units(orders[r], chunks))
            for r, m in memory.items() if r in orders}
