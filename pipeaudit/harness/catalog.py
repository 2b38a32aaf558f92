"""The schedules the harness can run, their stage placement and their constraints.

Torch-free on purpose: ``pipeaudit profile`` checks a configuration against this
table before any process starts (and before torch is imported).

The constraints below are what torch 2.13's ``torch.distributed.pipelining``
actually enforces or needs, found by reading ``schedules.py`` and by building and
dry-running every schedule for P = 1..6, v = 1..3, M = 1..24
(``tests/test_harness_catalog.py`` keeps this table honest against torch):

* ``1f1b``: ``Schedule1F1B`` raises unless M >= P.
* ``interleaved-1f1b`` / ``interleaved-zb``: with ``rounds = max(1, M // P)``
  torch raises unless ``M % rounds == 0`` (so M <= P always works, and above P
  M must be a multiple of ``M // P``; e.g. P=4: M=9, 11, 13, 14 fail).
* ``zbv`` / ``dualpipev``: exactly two stages per rank in a V (``chunks == 2``);
  ``ScheduleDualPipeV`` also raises unless M >= 2P (the number of stages).
* ``gpipe``, ``looped-bfs``, ``naive``: any M >= 1.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeaudit.errors import ConfigError


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


SCHEDULES: dict[str, ScheduleSpec] = {
    s.name: s
    for s in (
        ScheduleSpec(
            "naive", "naive", True, "loop", 1, 1, ("F", "B"), True,
            "one microbatch at a time through the whole pipeline, F then B; bubble (P-1)/P",
        ),
        ScheduleSpec(
            "gpipe", "ScheduleGPipe", False, "loop", 1, 1, ("F", "B"), False,
            "all forwards, then all backwards (fill-drain)",
        ),
        ScheduleSpec(
            "1f1b", "Schedule1F1B", False, "loop", 1, 1, ("F", "B"), False,
            "warm-up forwards, then one forward one backward, then cool-down",
        ),
        ScheduleSpec(
            "interleaved-1f1b", "ScheduleInterleaved1F1B", True, "loop", None, 2, ("F", "B"), True,
            "1F1B over v model chunks per rank (depth first)",
        ),
        ScheduleSpec(
            "looped-bfs", "ScheduleLoopedBFS", True, "loop", None, 2, ("F", "B"), True,
            "breadth first over v chunks per rank: all microbatches of a chunk at once",
        ),
        ScheduleSpec(
            "interleaved-zb", "ScheduleInterleavedZeroBubble", True, "loop", None, 2,
            ("F", "I", "W"), True,
            "interleaved zero bubble (ZB1P): backward split into I and W, W fills bubbles",
        ),
        ScheduleSpec(
            "zbv", "ScheduleZBVZeroBubble", True, "v", 2, 2, ("F", "I", "W"), True,
            "zero bubble V: two chunks per rank in a V, F/I/W",
        ),
        ScheduleSpec(
            "dualpipev", "ScheduleDualPipeV", True, "v", 2, 2, ("F", "B", "I", "W"), True,
            "DualPipeV: V placement, overlapped F+B pairs (OVERLAP_F_B), some I/W",
        ),
    )
}

SCHEDULE_NAMES: tuple[str, ...] = tuple(SCHEDULES)


def get_spec(name: str) -> ScheduleSpec:
    """The spec of schedule ``name``, or a ConfigError listing the known names."""
    try:
        return SCHEDULES[name]
    except KeyError:
        raise ConfigError(
            f"unknown schedule {name!r}; choose one of: {', '.join(SCHEDULE_NAMES)}"
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
    spec = get_spec(name)
    p, m, v = num_ranks, num_microbatches, chunks
    if p < 1:
        raise ConfigError(f"--stages must be >= 1, got {p}")
    if m < 1:
        raise ConfigError(f"--microbatches must be >= 1, got {m}")
    if v < 1:
        raise ConfigError(f"--chunks must be >= 1, got {v}")
    if spec.fixed_chunks is not None and v != spec.fixed_chunks:
        if spec.fixed_chunks == 1:
            raise ConfigError(
                f"schedule {name} runs one stage per rank: --chunks must be 1, got {v}"
            )
        raise ConfigError(
            f"schedule {name} needs exactly {spec.fixed_chunks} stages per rank "
            f"(V placement): --chunks must be {spec.fixed_chunks}, got {v}"
        )
    if name == "1f1b" and m < p:
        raise ConfigError(
            f"schedule 1f1b needs at least as many microbatches as ranks: "
            f"--microbatches {m} < --stages {p}"
        )
    if name in ("interleaved-1f1b", "interleaved-zb"):
        rounds = max(1, m // p)
        if m % rounds != 0:
            ok = sorted({x for x in range(1, 4 * p + 1) if x % max(1, x // p) == 0})
            raise ConfigError(
                f"schedule {name} needs --microbatches to be a multiple of "
                f"max(1, M // P) = {rounds} (torch's rounds), got M={m} with P={p}; "
                f"valid M for P={p} include {', '.join(map(str, ok[:12]))}, ..."
            )
    if name == "dualpipev" and m < 2 * p:
        raise ConfigError(
            f"schedule dualpipev needs at least as many microbatches as stages: "
            f"--microbatches {m} < 2 x --stages = {2 * p}"
        )
