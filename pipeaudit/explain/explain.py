"""``explain``: the critical path of every step, slack, and the causes worth fixing."""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass, field

from pipeaudit import SCHEMA_VERSION
from pipeaudit.errors import ScheduleError, TraceError
from pipeaudit.explain.calibrate import Calibration, calibrate, fill_delays
from pipeaudit.explain.causes import Cause, rank_causes
from pipeaudit.explain.critical import COMPUTE, CriticalPath, path_of
from pipeaudit.explain.graph import StepGraph, build_graphs, pipeline_layout
from pipeaudit.timeline.model import Timeline


@dataclass
class Explanation:
    """What ``pipeaudit explain`` reports (times in µs)."""

    steps: list[CriticalPath]
    top_causes: list[Cause]
    comm_gain_us: float
    host_gain_us: float
    calibration: dict
    ranks: list[int]
    inputs: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def median_step(self) -> CriticalPath | None:
        """The step whose time is the median (the one the text report draws)."""
        if not self.steps:
            return None
        ordered = sorted(self.steps, key=lambda p: p.step_time_us)
        return ordered[(len(ordered) - 1) // 2]

    def to_dict(self) -> dict:
        return {
            "schema_version": SCHEMA_VERSION, "tool": "pipeaudit explain", "inputs": self.inputs,
            "ranks": self.ranks,
            "steps": [p.to_dict() for p in self.steps],
            "top_causes": [c.to_dict() for c in self.top_causes],
            "comm_gain_us_if_10pct_faster": self.comm_gain_us,
            "host_gain_us_if_10pct_faster": self.host_gain_us,
            "calibration": self.calibration, "notes": self.notes,
        }


def _where(tl: Timeline) -> str | None:
    if not tl.inputs:
        return None
    if len(tl.inputs) == 1:
        return tl.inputs[0]
    try:
        return os.path.commonpath(tl.inputs) or tl.inputs[0]
    except ValueError:
        return tl.inputs[0]


def prepared_graphs(tl: Timeline) -> tuple[list[StepGraph], Calibration, list[str]]:
    """Every step's graph with modelled delays, and the run's calibration."""
    if tl.layout is not None and len(tl.layout.replicas) > 1:
        raise ScheduleError(f"the job has {len(tl.layout.replicas)} pipeline replicas: explain "
                            "or replay one at a time (Run.pipeline(d), or --pipeline D)")
    try:
        pipeline_layout(tl)
    except ScheduleError as exc:
        raise TraceError(_where(tl), str(exc)) from None
    graphs, notes = build_graphs(tl)
    if not graphs:
        raise ScheduleError("no step of the run could be turned into a dependency graph"
                            + (f" ({notes[0]})" if notes else ""))
    cal = calibrate(graphs)
    for g in graphs:
        fill_delays(g, cal)
    if tl.shared_device is not None:
        notes.insert(0, f"the stages took turns on {tl.shared_device}: these graphs give each "
                        "stage a device of its own, so their communication waits and host gaps "
                        "include each stage's wait for the others' turns, and their replays "
                        "predict a device per stage")
    return graphs, cal, notes


def critical_path(tl: Timeline, step: int) -> CriticalPath:
    """The critical path of ``step`` (delays calibrated over all steps of ``tl``)."""
    graphs, _, notes = prepared_graphs(tl)
    for g in graphs:
        if g.step == step:
            return path_of(g)
    raise ScheduleError(f"step {step} is not in the run (steps: {[g.step for g in graphs]})"
                        + (f"; {notes[0]}" if notes else ""))


def explain(tl: Timeline) -> Explanation:
    """Critical paths, slack and ranked causes of every step of ``tl``."""
    graphs, cal, notes = prepared_graphs(tl)
    paths = [path_of(g) for g in graphs]
    on_path: dict[tuple[int, str], float] = defaultdict(float)
    for p in paths:
        for i in p.items:
            if i.what == COMPUTE:
                on_path[(i.stage, i.kind)] += i.duration_us / len(paths)
    causes = rank_causes(graphs, on_path)
    ranks = graphs[0].ranks
    return Explanation(paths, causes.top, causes.comm_gain_us, causes.host_gain_us,
                       cal.to_dict(ranks), ranks, list(tl.inputs), notes + causes.notes)
