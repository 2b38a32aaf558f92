"""The truth of a generated run, computed from its own timeline by docs/metrics.md's
definitions: a rank's compute C in step k is the union of its actions' compute ops; the step
window W_k runs from the earliest compute start to the latest compute end over all ranks of the
pipeline replica; the bubble is 1 - |C ∩ W_k| / |W_k|, and a rank's bubble is its mean over
steps. A pipeline replica holds its tensor-parallel peers: one window over all of them.
With one rank's file only, the window is that rank's own (first to last compute)."""

from __future__ import annotations

from dataclasses import dataclass, field

from tests.support.tracegen.case import Case
from functools import lru_cache

from tests.support.tracegen.orders import SCHEDULES, compute_orders, valid
from tests.support.tracegen.timing import RankRun


@dataclass
class Truth:
    """What a reading of the case must find."""

    schedule: str
    accepted_schedules: frozenset[str]  #: names whose order is the same at this P, v, M
    pp: int
    v: int
    m: int
    steps: int
    own_window: bool
    rank_bubble: dict[int, float] = field(default_factory=dict)
    rank_bubble_by_step: dict[int, list[float]] = field(default_factory=dict)
    rank_compute_us: dict[int, float] = field(default_factory=dict)  #: mean per step
    windows: dict[tuple[int, int], tuple[float, float]] = field(default_factory=dict)


def union_length(iv: list[tuple[float, float]]) -> float:
    """Total length of a union of intervals."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(iv):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def _relabelled(order) -> tuple:
    """An order with each action's microbatch replaced by its occurrence count per stage and
    kind: what a trace without annotations shows (its microbatches follow execution order)."""
    seen: dict[tuple[int, str], int] = {}
    out = []
    for a in order:
        n = seen.get((a.stage, a.kind), 0)
        seen[(a.stage, a.kind)] = n + 1
        out.append((a.stage, a.kind, n))
    return tuple(out)


@lru_cache(maxsize=4096)
def accepted(schedule: str, pp: int, v: int, m: int, position: int | None = None,
             labelled: bool = True) -> frozenset[str]:
    """The schedule's name and every other name that runs the same per-rank order (of the rank
    at ``position`` alone when only its trace is read; with microbatches numbered in execution
    order unless ``labelled``: annotations name them)."""
    def seen(name: str):
        orders = compute_orders(name, pp, v, m)
        orders = orders if position is None else orders[position:position + 1]
        return orders if labelled else tuple(_relabelled(o) for o in orders)

    mine = seen(schedule)
    names = {schedule}
    for other in SCHEDULES:
        if other != schedule and valid(other, pp, v, m) and seen(other) == mine:
            names.add(other)
    if v == 1:
        if "interleaved-1f1b" in names:
            names.add("eager-1f1b")
        if "interleaved-zb" in names:
            names.add("zb-h1")
        if m == 1 and "gpipe" in names:
            names.add("naive")
    return frozenset(names)


def truth(case: Case, runs: list[RankRun]) -> Truth:
    """The truth of the case from its simulated ranks."""
    pos = next((r.position for r in runs if r.rank == case.one_rank), None)
    tr = Truth(case.schedule, accepted(case.schedule, case.pp, case.v, case.m, pos,
                                      case.annotated), case.pp,
               case.v, case.m, case.steps, case.one_rank is not None)
    groups: dict[int, list[RankRun]] = {}
    for r in runs:  # a pipeline replica: its P stages' ranks, with their TP peers
        groups.setdefault(r.replica, []).append(r)
    for g, members in groups.items():
        for k in range(case.steps):
            ivs = [iv for r in members for iv in r.compute.get(k, [])]
            tr.windows[(g, k)] = (min(a for a, _ in ivs), max(b for _, b in ivs))
    for g, members in groups.items():
        for r in members:
            per = []
            comp = 0.0
            for k in range(case.steps):
                iv = r.compute.get(k, [])
                c = union_length(iv)
                comp += c
                if tr.own_window:
                    w0, w1 = min(a for a, _ in iv), max(b for _, b in iv)
                else:
                    w0, w1 = tr.windows[(g, k)]
                per.append(1.0 - c / (w1 - w0))
            tr.rank_bubble_by_step[r.rank] = per
            tr.rank_bubble[r.rank] = sum(per) / len(per)
            tr.rank_compute_us[r.rank] = comp / case.steps
    return tr

