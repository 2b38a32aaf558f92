"""Typical delays and durations of a run, measured over all its steps.

* Communication delay per edge type (``activation``: into an F; ``gradient``: into a B or I):
  the mean observed delay of the cross-rank edges that bound their consumer. Where no edge
  of a type ever bound, the smallest delay seen on that type (an upper bound of the latency).
* Host/launch gap per rank: the mean gap after the rank's previous action, over the
  actions whose start that previous action bound (a rank's first action is not counted: the
  gap from the step start is 0 by assumption in a model).
* Duration per (stage, kind): the mean occupancy (first to last compute) and the mean
  compute time (union of compute intervals) of its actions.

Means, not medians: a step time is a sum along a path, and these delays are skewed to the
right (a descheduled rank, a slow transfer); medians undercount the sum. On the bundled CPU
samples the typical model of the unchanged order is -22%..-3% off the measured step with
medians and -10%..+4% with means (docs/explain.md).

A modelled edge that did not bind in the trace takes ``min(typical, observed)``: the trace
proves its real delay was at most the observed one. With that rule a replay of the observed
order reproduces every measured start exactly (see :mod:`pipeaudit.explain.model`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from statistics import mean

from pipeaudit.explain.graph import STEP_START, Edge, StepGraph

ACTIVATION, GRADIENT = "activation", "gradient"


def edge_type(kind: str) -> str:
    """Communication type of a data edge into an action of ``kind``."""
    return ACTIVATION if kind == "F" else GRADIENT


@dataclass
class Calibration:
    """Typical values of a run (ns), keyed as documented in the module."""

    comm: dict[str, float]
    comm_source: dict[str, str]  # type -> "binding mean" | "smallest observed" | "none"
    gap: dict[int, float]  # rank index -> mean host gap
    duration: dict[tuple[int, str], float]  # (stage, kind) -> mean occupancy
    compute: dict[tuple[int, str], float]  # (stage, kind) -> mean compute time
    samples: dict[str, int] = field(default_factory=dict)

    def comm_delay(self, kind: str) -> float:
        return self.comm.get(edge_type(kind), 0.0)

    def to_dict(self, ranks: list[int]) -> dict:
        """JSON form (µs); ranks by their trace rank id."""
        return {
            "comm_delay_us": {k: v / 1000 for k, v in self.comm.items()},
            "comm_delay_source": dict(self.comm_source),
            "host_gap_us": {str(ranks[i]): v / 1000 for i, v in sorted(self.gap.items())},
            "samples": dict(self.samples),
        }


def _clamp(x: float) -> float:
    return x if x > 0 else 0.0


def calibrate(graphs: list[StepGraph]) -> Calibration:
    """Typical communication delays, host gaps and durations over ``graphs``."""
    binding_comm: dict[str, list[float]] = defaultdict(list)
    all_comm: dict[str, list[float]] = defaultdict(list)
    gaps: dict[int, list[float]] = defaultdict(list)
    durs: dict[tuple[int, str], list[float]] = defaultdict(list)
    comps: dict[tuple[int, str], list[float]] = defaultdict(list)
    for g in graphs:
        for n in g.nodes:
            durs[(n.action.stage, n.action.kind)].append(n.duration)
            comps[(n.action.stage, n.action.kind)].append(n.compute_ns)
        for e in g.edges:
            dst = g.nodes[e.dst]
            if e.cross:
                t = edge_type(dst.action.kind)
                all_comm[t].append(_clamp(e.observed))
                if e.binding:
                    binding_comm[t].append(_clamp(e.observed))
            elif e.binding and e.src != STEP_START:
                gaps[dst.rank_index].append(_clamp(e.observed))
    comm, source = {}, {}
    for t in (ACTIVATION, GRADIENT):
        if binding_comm[t]:
            comm[t], source[t] = float(mean(binding_comm[t])), "binding mean"
        elif all_comm[t]:
            comm[t], source[t] = float(min(all_comm[t])), "smallest observed"
    for t in (ACTIVATION, GRADIENT):  # a type never seen borrows the other's, else free
        if t not in comm:
            other = [v for v in comm.values()]
            comm[t], source[t] = (other[0], "other type") if other else (0.0, "none")
    all_gaps = [x for v in gaps.values() for x in v]
    fallback = float(mean(all_gaps)) if all_gaps else 0.0
    ranks = {n.rank_index for g in graphs for n in g.nodes}
    gap = {r: float(mean(gaps[r])) if gaps[r] else fallback for r in sorted(ranks)}
    return Calibration(
        comm=comm, comm_source=source, gap=gap,
        duration={k: float(mean(v)) for k, v in durs.items()},
        compute={k: float(mean(v)) for k, v in comps.items()},
        samples={"activation_edges": len(binding_comm[ACTIVATION]),
                 "gradient_edges": len(binding_comm[GRADIENT]), "host_gaps": len(all_gaps)},
    )


def typical_delay(g: StepGraph, e: Edge, cal: Calibration) -> float:
    """The calibrated delay of edge ``e`` regardless of what the trace shows for it."""
    if e.cross:
        return cal.comm_delay(g.nodes[e.dst].action.kind)
    if e.src == STEP_START:
        return 0.0
    return cal.gap.get(g.nodes[e.dst].rank_index, 0.0)


def fill_delays(g: StepGraph, cal: Calibration) -> None:
    """Model each edge's minimal delay: the observed one where it bound, else
    ``min(typical, observed)`` (never negative)."""
    for e in g.edges:
        obs = _clamp(e.observed)
        e.delay = obs if e.binding else min(typical_delay(g, e, cal), obs)
