"""Replay a step model with :func:`pipeaudit.schedules.replay`.

Two ways to build the model:

* :func:`measured_model` takes one measured step as it ran: its order, each action's measured
  duration, each edge's modelled delay (observed where it bound, else the typical one capped
  by the observed one) and each rank's host gaps. Unchanged, its replay reproduces the step's
  measured start and end times exactly; that is what makes "this stage 10% faster" a clean
  difference.
* :func:`typical_model` takes any order (another schedule, another M) with per-(stage, kind)
  durations, one communication delay per edge type and one host gap per rank.

The predicted bubble uses the compute time of each action (the union of its compute
intervals), as the measured bubble does; the step time uses the occupancy (first to last
compute), which is what holds the rank.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pipeaudit.actions import Action
from pipeaudit.explain.calibrate import Calibration
from pipeaudit.explain.graph import StepGraph
from pipeaudit.schedules import ReplayResult, replay

Scale = Callable[[int, str], float]  # (stage, kind) -> factor


def no_scale(stage: int, kind: str) -> float:
    return 1.0


@dataclass
class StepModel:
    """Everything a replay needs (times in ns)."""

    orders: list[list[Action]]
    placement: list[int]
    duration: Callable[[int, Action], float]
    compute: Callable[[int, Action], float]
    comm: Callable[[Action, Action], float]
    gap: Callable[[int, Action], float]
    #: overlapped (forward, backward) pairs run as torch runs OVERLAP_F_B (Schedule.pairs)
    pairs: frozenset = frozenset()


@dataclass(frozen=True)
class Predicted:
    """A replayed step: its time (ns) and bubble (docs/metrics.md definition, mean over ranks)."""

    step_time: float
    bubble: float
    rank_bubble: tuple[float, ...]
    result: ReplayResult


def run_model(m: StepModel) -> Predicted:
    """Replay ``m``; raises :class:`pipeaudit.errors.ScheduleError` on a deadlock."""
    res = replay(m.orders, m.placement, m.duration, m.comm, gap=m.gap, pairs=m.pairs)
    span = res.makespan
    busy = [sum(m.compute(r, a) for a in order) for r, order in enumerate(m.orders)]
    rb = tuple((1.0 - b / span) if span > 0 else 0.0 for b in busy)
    return Predicted(span, sum(rb) / len(rb) if rb else 0.0, rb, res)


def measured_model(g: StepGraph, scale: Scale = no_scale, comm_latency: float | None = None,
                   *, comm_scale: float = 1.0, gap_scale: float = 1.0) -> StepModel:
    """The step as measured; ``scale`` multiplies durations, ``comm_latency`` (ns) replaces
    every cross-rank delay, ``comm_scale``/``gap_scale`` multiply the modelled cross-rank
    delays and same-rank gaps."""
    dur: dict[tuple[int, Action], float] = {}
    comp: dict[tuple[int, Action], float] = {}
    gaps: dict[tuple[int, Action], float] = {}
    comm: dict[tuple[Action, Action], float] = {}
    for n in g.nodes:
        f = scale(n.action.stage, n.action.kind)
        dur[(n.rank_index, n.action)] = n.duration * f
        comp[(n.rank_index, n.action)] = n.compute_ns * f
    for e in g.edges:
        dst = g.nodes[e.dst]
        if e.cross:
            comm[(g.nodes[e.src].action, dst.action)] = (
                e.delay * comm_scale if comm_latency is None else comm_latency)
        else:
            gaps[(dst.rank_index, dst.action)] = e.delay * gap_scale
    # the replay counts from 0 = the step start
    latency = 0.0 if comm_latency is None else comm_latency
    return StepModel(
        orders=g.action_orders(), placement=list(g.placement),
        duration=lambda r, a: dur[(r, a)], compute=lambda r, a: comp[(r, a)],
        comm=lambda p, c: comm.get((p, c), latency),
        gap=lambda r, a: gaps.get((r, a), 0.0),
    )


def typical_model(orders: Sequence[Sequence[Action]], placement: Sequence[int],
                  duration: Callable[[int, str], float], compute: Callable[[int, str], float],
                  cal: Calibration, comm_latency: float | None = None,
                  pairs: frozenset = frozenset()) -> StepModel:
    """A model of any order from typical values: ``duration``/``compute`` per (stage, kind)
    (ns), the calibrated delays (or ``comm_latency`` ns for every cross-rank edge), the
    calibrated host gap of each rank before every action but its first; ``pairs``: the
    schedule's overlapped F/B pairs."""
    firsts = {r: o[0] for r, o in enumerate(orders) if o}

    def comm(p: Action, c: Action) -> float:
        return cal.comm_delay(c.kind) if comm_latency is None else comm_latency

    def gap(r: int, a: Action) -> float:
        return 0.0 if firsts.get(r) == a else cal.gap.get(r, 0.0)

    return StepModel(
        orders=[list(o) for o in orders], placement=list(placement),
        duration=lambda r, a: duration(a.stage, a.kind),
        compute=lambda r, a: compute(a.stage, a.kind),
        comm=comm, gap=gap, pairs=frozenset(pairs),
    )
