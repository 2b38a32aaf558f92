"""Peak memory of a candidate schedule, from the measured run's ``[memory]`` events.

The model, per rank: memory at each point of the rank's order is
``base + grads (once its first backward ran) + unit x rows_ratio x units held``, and the peak is
its largest value.

- ``base`` is what the rank holds before its first action of a step (weights, optimizer
  state; gradients freed by ``zero_grad``), and ``grads`` what it holds more after its last
  (the gradients), the medians over steps;
- a rank's activations per in-flight microbatch are split evenly over its chunks, so one
  (stage, microbatch) in flight holds 1/v of them; ``inflight_units`` is the most such units
  the rank's order holds at once (+1/v at a forward, -1/v where the microbatch's last
  backward piece of that stage runs: B, or W when the backward is split);
- ``unit`` is measured: the value that makes the measured order's peak the measured peak;
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


def _profile(order: Sequence, chunks: int) -> list[tuple[float, bool]]:
    """(units held, whether a backward ran yet) after each action of one rank's ``order``;
    each (stage, microbatch) is 1/``chunks`` of the rank's per-microbatch activations, held from
    its forward to its last backward piece on that stage (B, or W when the backward is split)."""
    release: dict[tuple[int, int], str] = {}
    for a in order:
        if a.kind in ("B", "W"):
            release[(a.stage, a.microbatch)] = a.kind
    held, backward, out = 0.0, False, []
    freed: set[tuple[int, int]] = set()
    for a in order:
        key = (a.stage, a.microbatch)
        if a.kind == "F":
            held += 1.0 / chunks
        else:
            backward = True
            if a.kind == release.get(key) and key not in freed:
                freed.add(key)
                out.append((held, backward))  # the piece runs with its activations held
                held -= 1.0 / chunks
                continue
        out.append((held, backward))
    return out


def inflight_units(order: Sequence, chunks: int) -> float:
    """Most (stage, microbatch) activations held at once by one rank's ``order``, each
    1/``chunks`` of the rank's per-microbatch share."""
    return max((h for h, _ in _profile(order, chunks)), default=0.0)


def order_peak(order: Sequence, chunks: int, base: float, grads: float, unit: float) -> float:
    """The largest ``base + grads (after the first backward) + unit x units held``."""
    return max((base + (grads if b else 0.0) + unit * h for h, b in _profile(order, chunks)),
               default=base)


def _solve_unit(order: Sequence, chunks: int, base: float, grads: float, peak: float) -> float:
    """The unit that makes ``order``'s peak ``peak`` (the peak grows with the unit)."""
    lo, hi = 0.0, max(peak - base, 1.0)
    if order_peak(order, chunks, base, grads, lo) >= peak:
        return 0.0
    while order_peak(order, chunks, base, grads, hi) < peak:
        hi *= 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if order_peak(order, chunks, base, grads, mid) < peak else (lo, mid)
    return (lo + hi) / 2


@dataclass(frozen=True)
class RankMemory:
    """What one rank's memory is made of (bytes)."""

    rank: int
    base: int  #: held before the first action of a step
    grads: int  #: held more after the last (the gradients)
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
        bounds = rt.actions.group_by("step").agg(pl.col("start").min(), pl.col("end").max())
        ts = mem["ts"].to_numpy()
        alloc = mem["total_allocated"].to_numpy()
        before, after = [], []
        for start, end in zip(bounds["start"].to_list(), bounds["end"].to_list()):
            i = int(ts.searchsorted(start, side="right")) - 1
            j = int(ts.searchsorted(end, side="right")) - 1
            if i >= 0 and j >= 0:
                before.append(int(alloc[i]))
                after.append(int(alloc[j]))
        if not before:
            return None
        base = int(median(before))
        grads = max(0, int(median(after)) - base)
        peak = int(alloc.max())
        unit = _solve_unit(measured_orders[rt.rank], chunks, base, grads, peak)
        out[rt.rank] = RankMemory(rt.rank, base, grads, peak, unit)
    return out


def predicted_peaks(memory: dict[int, RankMemory], orders: dict[int, Sequence], chunks: int,
                    rows_ratio: float) -> dict[int, int]:
    """Each rank's predicted peak for a candidate's per-rank ``orders``."""
    return {r: int(order_peak(orders[r], chunks, m.base, m.grads, m.unit * rows_ratio))
            for r, m in memory.items() if r in orders}
