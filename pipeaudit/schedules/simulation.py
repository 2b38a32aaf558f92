"""Simulate a schedule: replay with uniform durations and set it against the closed form.

This is what ``pipeaudit simulate`` runs; the CLI only parses options and prints. Durations
given here are *per rank* (the time of one rank's share of the model for one microbatch); a
rank holding v chunks runs each of them for duration / v, so schedules with different v are
compared on the same model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pipeaudit import SCHEMA_VERSION
from pipeaudit.errors import ConfigError, ScheduleError
from pipeaudit.schedules.catalogue import DESCRIPTIONS, build_schedule, free_chunks
from pipeaudit.schedules.detect import detect_schedule
from pipeaudit.schedules.model import Schedule
from pipeaudit.schedules.replay import ReplayResult, replay, uniform_durations
from pipeaudit.schedules.theory import Theory, theory


#: what the numbers under "bubble" are, written into the JSON next to them
MEANING = ("simulated, theory and published.value are fractions of the step (idle time / step "
           "window, mean over ranks); ratio_* are ratios of bubble time to compute time; theory "
           "is the per-step closed form, published the source's formula at the same durations")


@dataclass(frozen=True)
class Durations:
    """Per-rank durations of F, full B and W (W default B/2), and the comm latency."""

    t_f: float = 1.0
    t_b: float = 2.0
    t_w: float | None = None
    comm: float = 0.0

    def __post_init__(self) -> None:
        tw = self.w
        if self.t_f < 0 or self.t_b < 0 or tw < 0 or self.comm < 0:
            raise ConfigError("durations and --comm must be non-negative")
        if tw > self.t_b:
            raise ConfigError(f"--tw ({tw:g}) cannot exceed --tb ({self.t_b:g}): a split backward "
                              f"runs I for tb - tw and W for tw")

    @property
    def w(self) -> float:
        return self.t_b / 2 if self.t_w is None else self.t_w


@dataclass(frozen=True)
class Simulation:
    """One simulated schedule: the schedule, its replay, its theory (None for a user schedule
    that matches no catalogue entry) and the per-chunk durations used."""

    schedule: Schedule
    result: ReplayResult
    theory: Theory | None
    durations: Durations
    chunk_t_f: float
    chunk_t_b: float
    chunk_t_w: float
    matches: tuple[str, ...] = ()


def simulate_schedule(schedule: Schedule, durations: Durations) -> Simulation:
    """Replay ``schedule`` with per-chunk durations = per-rank durations / v, zero-cost comm
    unless ``durations.comm`` says otherwise, and attach its closed form."""
    v = schedule.chunks
    tf, tb, tw = durations.t_f / v, durations.t_b / v, durations.w / v
    result = replay(schedule.orders, schedule.placement, uniform_durations(tf, tb, tw),
                    durations.comm, pairs=schedule.pairs)
    th: Theory | None = None
    matches = _catalogue_matches(schedule)
    if matches:
        th = theory(matches[0], schedule.num_ranks, schedule.num_microbatches, v, tf, tb, tw)
    return Simulation(schedule, result, th, durations, tf, tb, tw, matches)


def _catalogue_matches(schedule: Schedule) -> tuple[str, ...]:
    """The catalogue schedules whose order equals ``schedule``'s (its own name first when it
    is a catalogue name and the order is really that schedule's)."""
    if schedule.name in DESCRIPTIONS:
        try:
            same = build_schedule(schedule.name, schedule.num_ranks, schedule.num_microbatches,
                                  schedule.chunks)
        except ScheduleError:
            same = None
        if same is not None and (same.orders, same.placement, same.pairs) == (
                schedule.orders, schedule.placement, schedule.pairs):
            return (schedule.name,)
    found = detect_schedule(schedule.orders, schedule.placement, schedule.num_microbatches)
    # the same order with other overlapped pairs replays differently: not the same schedule
    return tuple(n for n in found if build_schedule(n, schedule.num_ranks, schedule.num_microbatches,
                                                    schedule.chunks).pairs == schedule.pairs)


def simulate(name: str, num_ranks: int, num_microbatches: int, chunks: int | None,
             durations: Durations) -> Simulation:
    """Build catalogue schedule ``name`` and simulate it."""
    return simulate_schedule(build_schedule(name, num_ranks, num_microbatches, chunks), durations)


def chunks_for(name: str, requested: int | None) -> int | None:
    """The v to use for ``name`` when the user gave ``requested`` for several schedules: only
    schedules whose chunk count is free take it."""
    return requested if free_chunks(name) else None


def simulation_to_dict(sim: Simulation, include_actions: bool = True) -> dict[str, Any]:
    """JSON-ready description of one simulation (``schema_version`` included)."""
    s, r, th = sim.schedule, sim.result, sim.theory
    out: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "schedule": s.name,
        "matches_catalogue": list(sim.matches),
        "P": s.num_ranks,
        "M": s.num_microbatches,
        "v": s.chunks,
        "num_stages": s.num_stages,
        "split_backward": s.split_backward,
        "durations": {
            "per_rank": {"t_f": sim.durations.t_f, "t_b": sim.durations.t_b, "t_w": sim.durations.w},
            "per_stage": {"t_f": sim.chunk_t_f, "t_b": sim.chunk_t_b, "t_w": sim.chunk_t_w,
                          "t_i": sim.chunk_t_b - sim.chunk_t_w},
            "comm": sim.durations.comm,
        },
        "makespan": r.makespan,
        "bubble": {
            "simulated": r.bubble,
            "theory": th.bubble if th else None,
            "theory_formula": th.formula if th else None,
            "ratio_simulated": (r.bubble / (1 - r.bubble)) if r.bubble < 1 else None,
            "ratio_theory": th.ratio if th else None,
            "ratio_formula": th.ratio_formula if th else None,
            "notes": th.notes if th else "no catalogue schedule matches this order; no closed form",
            "published": th.published.to_dict("time units") if th and th.published else None,
            "meaning": MEANING,
        },
        "ranks": [
            {"rank": i, "busy": r.rank_busy[i], "bubble": r.rank_bubble[i]} for i in range(s.num_ranks)
        ],
        "stages": [
            {
                "stage": st,
                "rank": s.placement[st],
                "peak_inflight": r.peak_inflight[st],
                "theory_peak_inflight": th.peak_inflight.get(st) if th else None,
            }
            for st in range(s.num_stages)
        ],
        "peak_inflight_formula": th.peak_formula if th else None,
    }
    if include_actions:
        t0 = r.window_start
        out["actions"] = [
            {"rank": a.rank, "action": str(a.action), "start": a.start - t0, "end": a.end - t0}
            for a in r.actions
        ]
    return out


@dataclass(frozen=True)
class SweepRow:
    """One (schedule, M) point of a sweep; ``skipped`` holds the reason when it cannot run."""

    schedule: str
    num_microbatches: int
    simulation: Simulation | None
    skipped: str | None = None


def sweep(names: Sequence[str], num_ranks: int, microbatches: Sequence[int], chunks: int | None,
          durations: Durations) -> list[SweepRow]:
    """Simulate every schedule at every M; invalid combinations become skipped rows."""
    rows: list[SweepRow] = []
    for name in names:
        for m in microbatches:
            try:
                sim = simulate(name, num_ranks, m, chunks_for(name, chunks), durations)
            except ScheduleError as exc:
                rows.append(SweepRow(name, m, None, str(exc)))
            else:
                rows.append(SweepRow(sim.schedule.name, m, sim))
    return rows


def sweep_row_to_dict(row: SweepRow) -> dict[str, Any]:
    """JSON-ready sweep row."""
    if row.simulation is None:
        return {"schedule": row.schedule, "M": row.num_microbatches, "skipped": row.skipped}
    sim = row.simulation
    th = sim.theory
    peaks = sim.result.peak_inflight
    return {
        "schedule": row.schedule,
        "M": row.num_microbatches,
        "v": sim.schedule.chunks,
        "makespan": sim.result.makespan,
        "bubble": {"simulated": sim.result.bubble, "theory": th.bubble if th else None,
                   "theory_formula": th.formula if th else None,
                   "published": th.published.to_dict("time units") if th and th.published else None,
                   "meaning": MEANING},
        "peak_inflight": {"simulated_max": max(peaks.values()),
                          "theory_max": max(th.peak_inflight.values()) if th else None,
                          "per_stage": [peaks[s] for s in sorted(peaks)]},
    }
