"""Schedules built from a building block (Qi et al. 2024, "Pipeline Parallelism with
Controllable Memory"): lay out the passes of one microbatch (or a few) across the stages,
repeat that block for every microbatch at a fixed interval, squeeze, optionally reorder.

* **Block**: passes ``(stage, kind, offset)`` (and, for blocks of several microbatches, which
  of them), laid out with the block's own pass durations (default F = 1, B = 2, I = W = 1).
* **Repeat**: block k starts at ``k * interval``; legal only when no two passes of one rank
  ever overlap, i.e. their [offset, offset + duration) intervals do not meet modulo the
  interval. :func:`collisions` names every colliding pair.
* **Squeeze**: the per-rank order of the repeated layout, run as soon as inputs allow (the
  replay with free communication) removes the redundant bubbles without changing the order.
* **Reorder** (optional, :mod:`pipeaudit.schedules.reorder`): warm-up and cool-down passes may
  run earlier when their inputs are there, without raising any rank's peak memory.

The peak number of microbatches a stage holds is fixed by the block: with one microbatch per
block it is ``ceil(lifespan / interval)``, the lifespan running from the start of the stage's F
to the end of its B (or I); :func:`lifespan_peaks` computes it for any block, and it equals the
in-flight count of the built order once M is large enough (tested).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from pipeaudit.actions import KINDS, Action
from pipeaudit.errors import ScheduleError
from pipeaudit.schedules.model import Schedule, as_orders

DEFAULT_DURATIONS: Mapping[str, float] = {"F": 1.0, "B": 2.0, "I": 1.0, "W": 1.0}
_EPS = 1e-9


@dataclass(frozen=True)
class Pass:
    """One pass of the block: ``microbatch`` is its index within the block (0 for blocks of
    one microbatch)."""

    stage: int
    kind: str
    offset: float
    microbatch: int = 0

    def __str__(self) -> str:
        name = f"{self.stage}{self.kind}{self.microbatch}"
        return f"{name} at offset {self.offset:g}"


@dataclass(frozen=True)
class BuildingBlock:
    """A block: its passes, the stage placement (stage -> rank), the interval it repeats at,
    and the pass durations its offsets assume."""

    name: str
    placement: tuple[int, ...]
    passes: tuple[Pass, ...]
    interval: float
    durations: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_DURATIONS))

    @property
    def num_ranks(self) -> int:
        return max(self.placement) + 1

    @property
    def num_stages(self) -> int:
        return len(self.placement)

    @property
    def microbatches(self) -> int:
        """Microbatches per block."""
        return 1 + max(p.microbatch for p in self.passes)

    def duration(self, p: Pass) -> float:
        return float(self.durations[p.kind])

    def end(self, p: Pass) -> float:
        return p.offset + self.duration(p)


# ------------------------------------------------------------------------------ checking


def check_block(block: BuildingBlock) -> None:
    """Raise :class:`ScheduleError` naming the passes when the block is not a schedule's
    block: a pass of an unknown kind or stage, a microbatch missing or doubling a pass, a
    pass laid out before its input is produced, or passes that collide when it repeats."""
    if block.interval <= 0:
        raise ScheduleError(f"block {block.name}: the repeat interval must be > 0, got {block.interval:g}")
    ranks = block.num_ranks
    if sorted(set(block.placement)) != list(range(ranks)):
        raise ScheduleError(f"block {block.name}: placement {list(block.placement)} must use ranks 0..{ranks - 1}")
    seen: dict[tuple[int, str, int], Pass] = {}
    for p in block.passes:
        if p.kind not in KINDS:
            raise ScheduleError(f"block {block.name}: pass {p}: kind must be one of F, B, I, W")
        if not 0 <= p.stage < block.num_stages:
            raise ScheduleError(f"block {block.name}: pass {p}: there are {block.num_stages} stages")
        if p.microbatch < 0 or p.offset < 0:
            raise ScheduleError(f"block {block.name}: pass {p}: offsets and microbatches are >= 0")
        if p.kind not in block.durations or block.durations[p.kind] <= 0:
            raise ScheduleError(f"block {block.name}: no positive duration for kind {p.kind}")
        key = (p.stage, p.kind, p.microbatch)
        if key in seen:
            raise ScheduleError(f"block {block.name}: {seen[key]} and {p} are the same pass")
        seen[key] = p
    for m in range(block.microbatches):
        for s in range(block.num_stages):
            have = {k for k in KINDS if (s, k, m) in seen}
            if "F" not in have or ("B" in have) == ("I" in have) or ("I" in have) != ("W" in have):
                raise ScheduleError(
                    f"block {block.name}: stage {s} microbatch {m} needs one F and one B, or "
                    f"one I and one W; it has {''.join(sorted(have)) or 'none'}")
    _check_dependencies(block, seen)
    clash = collisions(block)
    if clash:
        a, b = clash[0]
        more = f" (and {len(clash) - 1} more)" if len(clash) > 1 else ""
        raise ScheduleError(
            f"block {block.name}: {a} collides with {b} on rank {block.placement[a.stage]} when "
            f"the block repeats every {block.interval:g} (durations {_durations_text(block)}){more}")


def _durations_text(block: BuildingBlock) -> str:
    kinds = sorted({p.kind for p in block.passes}, key="FBIW".index)
    return ", ".join(f"{k}={block.durations[k]:g}" for k in kinds)


def _inputs(p: Pass, seen: Mapping[tuple[int, str, int], Pass], last_stage: int) -> list[Pass]:
    s, m = p.stage, p.microbatch
    if p.kind == "F":
        return [seen[(s - 1, "F", m)]] if s > 0 else []
    if p.kind == "W":
        return [seen[(s, "I", m)]]
    out = [seen[(s, "F", m)]]
    if s < last_stage:
        out.append(seen.get((s + 1, "B", m)) or seen[(s + 1, "I", m)])
    return out


def _check_dependencies(block: BuildingBlock, seen: Mapping[tuple[int, str, int], Pass]) -> None:
    last = block.num_stages - 1
    for p in block.passes:
        for q in _inputs(p, seen, last):
            if p.offset + _EPS < block.end(q):
                raise ScheduleError(
                    f"block {block.name}: {p} starts before its input {q} ends at "
                    f"{block.end(q):g}")


def collisions(block: BuildingBlock) -> list[tuple[Pass, Pass]]:
    """Pairs of passes of one rank whose intervals meet when the block repeats every
    ``interval`` (a pass longer than the interval collides with its own next copy)."""
    return list(_colliding_pairs(block))


def has_collision(block: BuildingBlock) -> bool:
    """Whether any two passes of one rank meet (stops at the first pair)."""
    return next(_colliding_pairs(block), None) is not None


def _colliding_pairs(block: BuildingBlock) -> Iterator[tuple[Pass, Pass]]:
    T = block.interval
    by_rank: dict[int, list[tuple[Pass, float]]] = defaultdict(list)
    for p in block.passes:
        by_rank[block.placement[p.stage]].append((p, block.duration(p)))
    for passes in by_rank.values():
        for i, (a, da) in enumerate(passes):
            if da > T + _EPS:
                yield a, a
            for b, db in passes[i + 1:]:
                if _meet(a.offset, da, b.offset, db, T):
                    yield a, b


def _meet(a: float, da: float, b: float, db: float, T: float) -> bool:
    """Do [a, a+da) and [b + kT, b + kT + db) overlap for some integer k?"""
    shift = (b - a) % T  # b's copy at or after a
    return shift < da - _EPS or shift + db > T + _EPS


# ------------------------------------------------------------------------------ building


def repeat(block: BuildingBlock, num_microbatches: int) -> list[tuple[float, int, Action]]:
    """The repeated layout: (start, rank, action) of every pass of microbatches 0..M-1, block
    k holding microbatches k*b .. k*b+b-1 (b per block) and starting at k * interval."""
    b = block.microbatches
    out = []
    for k in range(math.ceil(num_microbatches / b)):
        for p in block.passes:
            m = k * b + p.microbatch
            if m < num_microbatches:
                out.append((p.offset + k * block.interval, block.placement[p.stage],
                            Action(p.stage, p.kind, m)))
    out.sort(key=lambda x: (x[0], x[1], x[2].stage))
    return out


def build_from_block(block: BuildingBlock, num_microbatches: int, *, reorder: bool = False,
                     name: str | None = None) -> Schedule:
    """The schedule of ``block`` repeated for M microbatches: each rank's order is the order
    of its passes in the repeated layout (squeezing keeps it); ``reorder`` lets warm-up and
    cool-down passes run earlier (:func:`pipeaudit.schedules.reorder.reorder_ends`)."""
    if not isinstance(num_microbatches, int) or num_microbatches < 1:
        raise ScheduleError(f"M must be an integer >= 1, got {num_microbatches!r}")
    check_block(block)
    orders: list[list[Action]] = [[] for _ in range(block.num_ranks)]
    for _, rank, action in repeat(block, num_microbatches):
        orders[rank].append(action)
    chunks, rem = divmod(block.num_stages, block.num_ranks)
    if rem or any(block.placement.count(r) != chunks for r in range(block.num_ranks)):
        raise ScheduleError(f"block {block.name}: every rank must hold the same number of stages")
    sched = Schedule(
        name=name or block.name,
        num_ranks=block.num_ranks,
        num_microbatches=num_microbatches,
        chunks=chunks,
        placement=tuple(block.placement),
        orders=as_orders(orders),
        split_backward=any(p.kind in ("I", "W") for p in block.passes),
    )
    if reorder:
        from pipeaudit.schedules.reorder import reorder_ends

        sched = reorder_ends(sched, block.durations)
    return sched


def layout_makespan(block: BuildingBlock, num_microbatches: int) -> float:
    """Length of the repeated layout before squeezing."""
    lay = repeat(block, num_microbatches)
    ends = [t + block.durations[a.kind] for t, _, a in lay]
    return max(ends) - min(t for t, _, _ in lay)


# -------------------------------------------------------------------------------- memory


def lifespan_peaks(block: BuildingBlock) -> dict[int, int]:
    """Per stage, the most microbatches it holds once the block repeats (steady state): the
    most [F start, B/I end) lifespans of its copies that cover one instant. With one
    microbatch per block that is ``ceil(lifespan / interval)``."""
    spans: dict[int, list[tuple[float, float]]] = defaultdict(list)
    start = {(p.stage, p.microbatch): p.offset for p in block.passes if p.kind == "F"}
    for p in block.passes:
        if p.kind in ("B", "I"):
            spans[p.stage].append((start[(p.stage, p.microbatch)], block.end(p)))
    return {s: _most_covering(spans[s], block.interval) for s in range(block.num_stages)}


def lifespan_rank_peaks(block: BuildingBlock) -> dict[int, float]:
    """Per rank, the most activation it holds at one instant in the steady state, in
    microbatches of the whole model share of the rank (a stage of a rank holding v stages
    counts 1/v per microbatch)."""
    v = block.num_stages // block.num_ranks
    start = {(p.stage, p.microbatch): p.offset for p in block.passes if p.kind == "F"}
    out = {}
    for r in range(block.num_ranks):
        spans = [(start[(p.stage, p.microbatch)], block.end(p)) for p in block.passes
                 if p.kind in ("B", "I") and block.placement[p.stage] == r]
        out[r] = _most_covering(spans, block.interval) / v
    return out


def _most_covering(spans: Sequence[tuple[float, float]], T: float) -> int:
    """The most intervals [a + kT, b + kT) (any integer k) that contain one instant."""
    if not spans:
        return 0
    points = sorted({(a % T) for a, _ in spans})
    best = 0
    for t in points:
        n = 0
        for a, b in spans:
            # copies k with a + kT <= t' < b + kT, t' = t + jT for the window [0, T)
            lo = math.ceil((t - b) / T + _EPS)
            hi = math.floor((t - a) / T + _EPS)
            n += max(0, hi - lo + 1)
        best = max(best, n)
    return best


def rank_peaks(schedule: Schedule) -> dict[int, float]:
    """Per rank, the most activation it holds at one point of its order (F done - B/I done,
    summed over its stages), in microbatches of the rank's share of the model (1/v per
    microbatch and stage)."""
    out = {}
    for r, order in enumerate(schedule.orders):
        cur = peak = 0
        for a in order:
            if a.kind == "F":
                cur += 1
                peak = max(peak, cur)
            elif a.kind in ("B", "I"):
                cur -= 1
        out[r] = peak / schedule.chunks
    return out


def block_summary(block: BuildingBlock, schedule: Schedule, *, reordered: bool) -> dict:
    """JSON-ready description of a block and what it gives for ``schedule``'s M: the layout
    before squeezing (block time units) and the memory the block fixes against the order's."""
    M = schedule.num_microbatches
    return {
        "name": block.name,
        "interval": block.interval,
        "microbatches_per_block": block.microbatches,
        "placement": list(block.placement),
        "durations": {k: block.durations[k] for k in sorted({p.kind for p in block.passes},
                                                            key="FBIW".index)},
        "passes": [{"stage": p.stage, "kind": p.kind, "offset": p.offset,
                    "microbatch": p.microbatch} for p in block.passes],
        "reordered": reordered,
        "layout_makespan": layout_makespan(block, M),
        "lifespan_peak_inflight": lifespan_peaks(block),
        "lifespan_rank_peak": lifespan_rank_peaks(block),
        "rank_peak": rank_peaks(schedule),
    }
