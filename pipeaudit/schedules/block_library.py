"""Named building blocks: two that rebuild catalogue schedules exactly (1f1b, eager-1f1b) and
the three that add schedules from Qi et al. 2024's gallery ("Pipeline Parallelism with
Controllable Memory", and its playground: "1F1B-V schedule without doing any B-W split",
"Schedule with 2/3rd 1F1B memory by utilising B-W split. Note that two microbatches are included
in a single building block to avoid collision", "Variation of interleaved 1F1B with lower
memory"). Layout durations: F = 1, B = 2, I = W = 1, so a microbatch costs 3 per stage.

Each function takes P (ranks; for the interleaved variant also v) and returns the block; the
offsets are given by formulas, or found by a small exhaustive search where collisions depend on
P (documented on each function and in docs/schedules.md).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from functools import lru_cache

from pipeaudit.errors import ScheduleError
from pipeaudit.schedules.blocks import BuildingBlock, Pass, has_collision, lifespan_rank_peaks
from pipeaudit.schedules.model import loop_placement, v_placement

_SPLIT = {"F": 1.0, "I": 1.0, "W": 1.0}
_FULL = {"F": 1.0, "B": 2.0}


def one_f_one_b(P: int, v: int = 1) -> BuildingBlock:
    """1F1B: forwards down the stages back to back, then backwards in reverse order, the last
    stage's B right after its F. Interval T_F + T_B = 3."""
    passes = [Pass(s, "F", s) for s in range(P)]
    passes += [Pass(s, "B", P + 2 * (P - 1 - s)) for s in range(P)]
    return BuildingBlock("1f1b", loop_placement(P, 1), tuple(passes), 3.0, dict(_FULL))


def eager_1f1b(P: int, v: int = 1) -> BuildingBlock:
    """Eager 1F1B: as 1F1B with one T_F of slack after every forward and one T_B after every
    backward (room for the P2P transfers). Squeezing removes the slack; the order keeps
    2(P-s)-1 warm-up forwards on stage s. Interval 3."""
    passes = [Pass(s, "F", 2 * s) for s in range(P)]
    passes += [Pass(s, "B", 2 * P - 1 + 4 * (P - 1 - s)) for s in range(P)]
    return BuildingBlock("eager-1f1b", loop_placement(P, 1), tuple(passes), 3.0, dict(_FULL))


def one_f_one_b_v(P: int, v: int = 2) -> BuildingBlock:
    """1F1B-V: V placement (rank r holds stages r and 2P-1-r), no B/W split. The chain (F
    down the V, then B back up) is laid out pass by pass, each at the earliest offset after its
    input at which it collides with nothing placed before it on its rank, backtracking when a
    later pass finds no room. Interval 2(T_F + T_B) = 6. Every rank then holds
    ceil((2P+1)/3) microbatches at its peak, as the authors' implementation (v1f1b.py in
    sail-sg/zero-bubble-pipeline-parallelism) does for P = 2..10."""
    S = 2 * P
    chain = [(s, "F") for s in range(S)] + [(s, "B") for s in reversed(range(S))]
    offsets = _earliest_layout(chain, v_placement(P), _FULL, 6.0)
    passes = tuple(Pass(s, k, offsets[(s, k)]) for s, k in chain)
    return BuildingBlock("1f1b-v", v_placement(P), passes, 6.0, dict(_FULL))


def one_f_one_b_split_lowmem(P: int, v: int = 1) -> BuildingBlock:
    """1F1B with the backward split, two microbatches per block: microbatch j's F on stage s
    at s + 2j, its I at 2P-1-s + 2j (each I right after the I of the next stage: the
    input-gradient chain costs T_I, not T_B, per stage), and each W in the first free slot
    after its I. One microbatch per block would collide (F and I of stage s meet when
    2P-1-2s is a multiple of 3); two, offset by 2 in an interval of 6, never do. Stage s holds
    ceil(2(P-s)/3) microbatches: 2/3 of 1F1B's P-s."""
    T = 6.0
    passes: list[Pass] = []
    used: dict[int, set[int]] = {s: set() for s in range(P)}
    for j in (0, 1):
        for s in range(P):
            for kind, at in (("F", s + 2 * j), ("I", 2 * P - 1 - s + 2 * j)):
                passes.append(Pass(s, kind, float(at), j))
                used[s].add(at % 6)
    for j in (0, 1):
        for s in reversed(range(P)):
            t = 2 * P - s + 2 * j  # right after the I
            while t % 6 in used[s]:
                t += 1
            used[s].add(t % 6)
            passes.append(Pass(s, "W", float(t), j))
    return BuildingBlock("1f1b-split-lowmem", loop_placement(P, 1), tuple(passes), T, dict(_SPLIT))


@lru_cache(maxsize=256)  # a search over (3v)^3 gaps: detection asks for the same (P, v) often
def interleaved_1f1b_lowmem(P: int, v: int = 2) -> BuildingBlock:
    """Interleaved 1F1B (loop placement, v chunks) repeated one microbatch at a time, instead
    of in rounds of P microbatches per chunk as Megatron-LM and torch do. Forwards run down
    all vP stages, backwards back up; a gap of ``a`` before the forwards of each later chunk,
    ``b`` before the backwards and ``c`` between the backwards of two chunks avoid collisions:
    the smallest (a, b, c) in [0, 3v)^3 that gives no collision and the lowest peak memory
    (then the lowest total gap). Interval v(T_F + T_B) = 3v. Each chunk's lifespan is about
    one block, so a rank holds about 3P/4 microbatches for v = 2 (interleaved 1F1B: about
    3P/2), at about 1F1B's bubble instead of interleaved's."""
    T = 3.0 * v
    placement = loop_placement(P, v)
    best = None
    for a, b, c in itertools.product(range(int(T)), repeat=3):
        block = _interleaved_layout(P, v, a, b, c, placement, T)
        if has_collision(block):
            continue
        peaks = lifespan_rank_peaks(block)
        key = (max(peaks.values()), sum(peaks.values()), a + b + c, (a, b, c))
        if best is None or key < best[0]:
            best = (key, block)
    if best is None:
        raise ScheduleError(f"interleaved-1f1b-lowmem: no collision-free block for P={P}, v={v}")
    return best[1]


def _interleaved_layout(P: int, v: int, a: int, b: int, c: int, placement: tuple[int, ...],
                        T: float) -> BuildingBlock:
    S = v * P
    passes = [Pass(s, "F", float(s + a * (s // P))) for s in range(S)]
    t = passes[-1].offset + 1 + b
    for s in reversed(range(S)):
        passes.append(Pass(s, "B", float(t)))
        t += 2
        if s % P == 0 and s:
            t += c
    return BuildingBlock("interleaved-1f1b-lowmem", placement, tuple(passes), T, dict(_FULL))


def _earliest_layout(chain: list[tuple[int, str]], placement: tuple[int, ...],
                     durations: dict[str, float], T: float,
                     budget: int = 2_000_000) -> dict[tuple[int, str], float]:
    """Offsets for a one-microbatch chain (F down, B back up), each pass at the earliest
    integer offset after its input where it collides with nothing placed earlier on its rank;
    depth-first with backtracking. ScheduleError when none is found within ``budget`` tries."""
    period = int(T)
    used: dict[int, set[int]] = {}
    out: dict[tuple[int, str], float] = {}
    tries = [0]
    last = len(placement) - 1

    def ready(s: int, k: str) -> float:
        if k == "F":
            return out[(s - 1, "F")] + durations["F"] if s else 0.0
        t = out[(s, "F")] + durations["F"]
        return max(t, out[(s + 1, "B")] + durations["B"]) if s < last else t

    def place(i: int) -> bool:
        if i == len(chain):
            return True
        s, k = chain[i]
        rank, d = placement[s], int(durations[k])
        slots = used.setdefault(rank, set())
        start = int(ready(s, k))
        for t in range(start, start + period):
            tries[0] += 1
            if tries[0] > budget:
                return False
            cells = {(t + x) % period for x in range(d)}
            if cells & slots:
                continue
            slots |= cells
            out[(s, k)] = float(t)
            if place(i + 1):
                return True
            slots -= cells
            del out[(s, k)]
        return False

    if not place(0):
        raise ScheduleError(f"no collision-free layout of the chain within {budget} tries")
    return out


#: named blocks: name -> (builder (P, v) -> block, what it is)
NAMED_BLOCKS: dict[str, tuple[Callable[[int, int], BuildingBlock], str]] = {
    "1f1b": (one_f_one_b, "1F1B's block; repeated and squeezed it is the 1f1b order"),
    "eager-1f1b": (eager_1f1b, "1F1B's block with slack; squeezed it is the eager-1f1b order"),
    "1f1b-v": (one_f_one_b_v, "V placement without B/W split, about 2/3 of 1F1B's memory"),
    "1f1b-split-lowmem": (one_f_one_b_split_lowmem,
                          "B/W split, two microbatches per block, 2/3 of 1F1B's memory"),
    "interleaved-1f1b-lowmem": (interleaved_1f1b_lowmem,
                                "interleaved 1F1B one microbatch at a time: less memory"),
}


def named_block(name: str, num_ranks: int, chunks: int | None = None) -> BuildingBlock:
    """The named block for P ranks (v chunks where the block takes it)."""
    try:
        builder, _ = NAMED_BLOCKS[name]
    except KeyError:
        raise ScheduleError(f"unknown building block {name!r}; named blocks: "
                            f"{', '.join(NAMED_BLOCKS)}") from None
    if not isinstance(num_ranks, int) or num_ranks < 1:
        raise ScheduleError(f"P must be an integer >= 1, got {num_ranks!r}")
    defaults = {"1f1b-v": 2, "interleaved-1f1b-lowmem": 2}
    return builder(num_ranks, chunks or defaults.get(name, 1))


@lru_cache(maxsize=2)  # a schedule's ranks ask in turn; the catalogue caches the schedule
def _built(name: str, P: int, M: int, v: int):
    from pipeaudit.schedules.blocks import build_from_block

    return build_from_block(named_block(name, P, v), M, name=name)


def catalogue_orders(name: str) -> Callable[[int, int, int, int], list]:
    """The catalogue's order builder (P, M, v, rank) -> order of a block-built schedule."""

    def orders(P: int, M: int, v: int, r: int) -> list:
        return list(_built(name, P, M, v).orders[r])

    orders.__name__ = f"orders_{name.replace('-', '_')}"
    return orders


def block_from_option(source: str, num_ranks: int | None, chunks: int | None,
                      interval: float | None, placement: str | None) -> BuildingBlock:
    """``--building-block FILE|NAME``: the block in an existing file, else the named block
    for P ranks; ``interval`` overrides the block's (the result is checked for collisions)."""
    from dataclasses import replace
    from pathlib import Path

    from pipeaudit.schedules.block_files import load_block_file
    from pipeaudit.schedules.blocks import check_block

    if Path(source).exists():
        return load_block_file(source, placement=placement, num_ranks=num_ranks, interval=interval)
    if source not in NAMED_BLOCKS:
        raise ScheduleError(f"--building-block {source!r}: no such file, and not a named block "
                            f"({', '.join(NAMED_BLOCKS)})")
    if num_ranks is None:
        raise ScheduleError(f"the named block {source} needs -P/--ranks")
    if placement is not None:
        raise ScheduleError(f"--placement applies to building-block files; {source} has its own")
    block = named_block(source, num_ranks, chunks)
    if interval is not None:
        block = replace(block, interval=float(interval))
        check_block(block)
    return block
