"""Which speed-up would pay most: replay each step with one (stage, kind) 10% faster.

Each step is replayed with :func:`pipeaudit.explain.model.measured_model` (its observed order,
measured durations, modelled delays), which reproduces the measured step exactly when nothing
changes, so the predicted gain is the effect of the change alone. Communication and host gaps
are tried the same way (all cross-rank delays, resp. all same-rank gaps, 10% shorter).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from pipeaudit.errors import ScheduleError
from pipeaudit.explain.graph import StepGraph
from pipeaudit.explain.model import measured_model, run_model

SPEEDUP = 0.9  # "10% faster": durations times 0.9
US = 1000.0


@dataclass(frozen=True)
class Cause:
    """The predicted gain (µs per step, mean over steps) of one (stage, kind) 10% faster."""

    stage: int
    kind: str
    gain_us_if_10pct_faster: float
    gain_share: float  # of the mean step time
    on_path_us: float  # mean time this (stage, kind) computes on the critical path

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Causes:
    """Ranked stage/kind causes plus the same test for communication and host gaps."""

    top: list[Cause]
    comm_gain_us: float
    host_gain_us: float
    notes: list[str]


def rank_causes(graphs: list[StepGraph], on_path: dict[tuple[int, str], float]) -> Causes:
    """Gains of every (stage, kind) of ``graphs`` (delays filled), best first.

    ``on_path`` is the mean critical-path compute per (stage, kind) in µs, reported alongside.
    """
    gains: dict[tuple[int, str], list[float]] = {}
    comm, host, notes = [], [], []
    used = []
    for g in graphs:
        try:
            base = run_model(measured_model(g)).step_time
            keys = sorted({(n.action.stage, n.action.kind) for n in g.nodes})
            for key in keys:
                def scale(stage: int, kind: str, key=key) -> float:
                    return SPEEDUP if (stage, kind) == key else 1.0
                t = run_model(measured_model(g, scale)).step_time
                gains.setdefault(key, []).append(base - t)
            comm.append(base - run_model(measured_model(g, comm_scale=SPEEDUP)).step_time)
            host.append(base - run_model(measured_model(g, gap_scale=SPEEDUP)).step_time)
            used.append(g)
        except ScheduleError as exc:
            notes.append(f"step {g.step}: replay failed: {exc}")
    if not used:
        return Causes([], 0.0, 0.0, notes)
    n = len(used)
    mean_step = sum(g.step_time for g in used) / n
    top = [Cause(s, k, sum(v) / n / US, (sum(v) / n) / mean_step if mean_step else 0.0,
                 on_path.get((s, k), 0.0)) for (s, k), v in gains.items()]
    top.sort(key=lambda c: (-c.gain_us_if_10pct_faster, c.stage, c.kind))
    return Causes(top, sum(comm) / n / US, sum(host) / n / US, notes)
