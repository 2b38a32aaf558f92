"""The schedules the harness can run: a view of the one catalogue in ``pipeaudit.schedules``.

Torch-free on purpose: ``pipeaudit profile`` checks a configuration against the catalogue
before any process starts (and before torch is imported). Placement, chunk rule, torch class
and constraints are those of :mod:`pipeaudit.schedules.catalogue` (what torch 2.13 enforces,
kept honest by ``tests/unit/harness/test_harness_catalog.py``); this module only phrases the problems in
the harness's option names (``--ranks``, ``--microbatches``, ``--chunks``) as ConfigError.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeaudit.errors import ConfigError
from pipeaudit.schedules.catalogue import CATALOGUE, HARNESS, ScheduleDef, config_problem


@dataclass(frozen=True)
class ScheduleSpec:
    """One schedule the harness can run."""

    name: str  #: CLI name
    torch_class: str  #: torch class name, or "naive" (ours)
    multi_stage: bool  #: True when built from a list of stages (runtime schedules)
    placement: str  #: "loop" (stage s on rank s % P) or "v" (rank r holds r and 2P-1-r)
    fixed_chunks: int | None  #: required stages per rank, if any
    default_chunks: int
    kinds: tuple[str, ...]  #: compute action kinds the schedule emits
    torch_annotates: bool  #: torch itself wraps each action in record_function("PP:...")
    summary: str


def _spec(d: ScheduleDef) -> ScheduleSpec:
    return ScheduleSpec(d.name, d.harness_class or "", d.multi_stage, d.placement, d.fixed_chunks,
                        d.default_chunks, d.kinds, d.torch_annotates, d.summary or d.description)


SCHEDULES: dict[str, ScheduleSpec] = {
    d.name: _spec(d) for d in CATALOGUE.values() if d.harness_class is not None
}

SCHEDULE_NAMES: tuple[str, ...] = tuple(SCHEDULES)


def get_spec(name: str) -> ScheduleSpec:
    """The spec of schedule ``name``, or a ConfigError listing the known names."""
    try:
        return SCHEDULES[name]
    except KeyError:
        hint = (" (the analysis knows it, but the harness cannot run it)"
                if name in CATALOGUE else "")
        raise ConfigError(
            f"unknown schedule {name!r}{hint}; choose one of: {', '.join(SCHEDULE_NAMES)}"
        ) from None


def stage_to_rank(placement: str, num_ranks: int, chunks: int) -> list[int]:
    """Rank of each global stage (list indexed by stage).

    ``loop``: stage s on rank s % P. ``v`` (chunks must be 2): rank r holds stages
    r and 2P-1-r, i.e. stages go 0..P-1 down the ranks and come back up.
    """
    num_stages = num_ranks * chunks
    if placement == "loop":
        return [s % num_ranks for s in range(num_stages)]
    if placement == "v":
        out = []
        for s in range(num_stages):
            lap, pos = divmod(s, num_ranks)
            out.append(pos if lap % 2 == 0 else num_ranks - 1 - pos)
        return out
    raise ValueError(f"unknown placement {placement!r}")


def rank_stages(placement: str, num_ranks: int, chunks: int, rank: int) -> list[int]:
    """Global stages held by ``rank``, in increasing order."""
    return [s for s, r in enumerate(stage_to_rank(placement, num_ranks, chunks)) if r == rank]


def check_schedule(name: str, num_ranks: int, num_microbatches: int, chunks: int) -> None:
    """Raise ConfigError if torch 2.13 cannot run schedule ``name`` with P, M, v."""
    get_spec(name)
    problem = config_problem(name, num_ranks, num_microbatches, chunks, HARNESS)
    if problem:
        raise ConfigError(problem)
