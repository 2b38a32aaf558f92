"""Event-driven replay of per-rank action orders.

Each rank runs its order sequentially. An action starts when its rank is free and its inputs
have arrived:

* ``F(s, m)`` after ``F(s-1, m)`` (stage 0: no input);
* ``B(s, m)`` / ``I(s, m)`` after ``F(s, m)`` and after the input gradient from stage s+1,
  i.e. ``B(s+1, m)`` or ``I(s+1, m)`` (last stage: only its own ``F(s, m)``);
* ``W(s, m)`` after ``I(s, m)``.

A dependency produced on another rank adds the communication latency; an optional per-action
``gap`` is the time a rank needs between finishing its previous action (or the step start) and
starting the next one (host or launch overhead). An overlapped pair ``(F, B)`` (torch's
``OVERLAP_F_B``) runs its forward, then its backward, each when its own inputs are there, and
sends both outputs to other ranks only after the backward: what the forward produces is
available at once on its own rank, to other ranks at the pair's end. Start times are the
longest path through this DAG, computed once per action: O(actions + dependencies).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

from pipeaudit.actions import KINDS, Action
from pipeaudit.errors import ScheduleError

Duration = Callable[[int, Action], float] | Mapping[tuple[int, str], float]
CommLatency = float | Callable[[Action, Action], float]
Gap = Callable[[int, Action], float]


@dataclass(frozen=True)
class ReplayedAction:
    """One action with its simulated start and end time."""

    rank: int
    action: Action
    start: float
    end: float

    @property
    def duration(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class ReplayResult:
    """Outcome of :func:`replay`.

    ``makespan`` is the step window ``[min start, max end]`` over all ranks; a rank's bubble is
    ``1 - busy / makespan`` (docs/metrics.md), ``bubble`` the mean over ranks.
    """

    actions: tuple[ReplayedAction, ...]
    makespan: float
    rank_bubble: tuple[float, ...]
    bubble: float
    peak_inflight: dict[int, int]
    rank_busy: tuple[float, ...] = field(default=())
    window_start: float = 0.0

    @property
    def num_ranks(self) -> int:
        return len(self.rank_bubble)

    def of_rank(self, rank: int) -> tuple[ReplayedAction, ...]:
        """The replayed actions of ``rank`` in execution order."""
        return tuple(a for a in self.actions if a.rank == rank)

    @property
    def bubble_time(self) -> float:
        """Mean idle time per rank inside the step window."""
        return self.makespan * self.bubble


def uniform_durations(t_f: float = 1.0, t_b: float = 2.0, t_w: float | None = None
                      ) -> Callable[[int, Action], float]:
    """Durations by kind: F = t_f, B = t_b, and when backward is split I = t_b - t_w,
    W = t_w (default t_w = t_b / 2, so that I + W = B)."""
    tw = t_b / 2 if t_w is None else t_w
    if min(t_f, t_b, tw) < 0:
        raise ScheduleError("durations must be non-negative")
    if tw > t_b:
        raise ScheduleError(f"t_w ({tw}) cannot exceed t_b ({t_b}): I = t_b - t_w")
    table = {"F": float(t_f), "B": float(t_b), "I": float(t_b - tw), "W": float(tw)}
    return lambda rank, action: table[action.kind]


def _duration_fn(duration: Duration) -> Callable[[int, Action], float]:
    if callable(duration):
        return duration
    if isinstance(duration, Mapping):
        table = duration

        def lookup(rank: int, action: Action) -> float:
            try:
                return table[(action.stage, action.kind)]
            except KeyError:
                raise ScheduleError(
                    f"no duration for stage {action.stage} kind {action.kind} "
                    f"(duration mapping is keyed by (stage, kind))"
                ) from None

        return lookup
    raise TypeError("duration must be a callable (rank, action) -> float or a mapping")


def _validate_pairs(orders: Sequence[Sequence[Action]], placement: Sequence[int],
                    pairs: Collection[tuple[Action, Action]]) -> dict[Action, Action]:
    """first -> second of each overlapped pair, checked to be adjacent on one rank."""
    position = {a: (r, i) for r, order in enumerate(orders) for i, a in enumerate(order)}
    out: dict[Action, Action] = {}
    for first, second in pairs:
        where = position.get(first)
        if where is None or position.get(second) != (where[0], where[1] + 1):
            raise ScheduleError(f"overlapped pair ({first};{second}): the two actions must be "
                                "adjacent in one rank's order, the forward first")
        out[first] = second
    return out


def _validate(orders: Sequence[Sequence[Action]], placement: Sequence[int]) -> None:
    num_stages = len(placement)
    if any(r < 0 or r >= len(orders) for r in placement):
        raise ScheduleError(
            f"placement names ranks outside 0..{len(orders) - 1}: {list(placement)}"
        )
    seen: dict[tuple[int, str, int], Action] = {}
    for rank, order in enumerate(orders):
        for a in order:
            if a.kind not in KINDS:
                raise ScheduleError(f"rank {rank}: unknown action kind in {a}")
            if not 0 <= a.stage < num_stages:
                raise ScheduleError(
                    f"rank {rank}: action {a} names stage {a.stage}, "
                    f"but there are {num_stages} stages"
                )
            if placement[a.stage] != rank:
                raise ScheduleError(
                    f"rank {rank}: action {a} belongs to stage {a.stage}, "
                    f"which is placed on rank {placement[a.stage]}"
                )
            if a.microbatch < 0:
                raise ScheduleError(f"rank {rank}: negative microbatch in {a}")
            # B and I both produce the input gradient: at most one of them per (s, m)
            key = (a.stage, "G" if a.kind in ("B", "I") else a.kind, a.microbatch)
            prev = seen.get(key)
            if prev is not None:
                if prev == a:
                    raise ScheduleError(f"rank {rank}: {a} appears more than once")
                raise ScheduleError(
                    f"rank {rank}: {prev} and {a} both compute stage {a.stage}'s input "
                    f"gradient for microbatch {a.microbatch} (use B, or I followed by W)"
                )
            seen[key] = a


def replay(
    orders: Sequence[Sequence[Action]],
    placement: Sequence[int],
    duration: Duration,
    comm_latency: CommLatency = 0.0,
    *,
    gap: Gap | None = None,
    pairs: Collection[tuple[Action, Action]] = (),
) -> ReplayResult:
    """Replay per-rank action orders with the given durations and communication latency.

    ``duration`` is a callable ``(rank, action) -> seconds`` or a mapping keyed by
    ``(stage, kind)``. ``comm_latency`` is added to every dependency that crosses ranks; a
    callable gets ``(producer, consumer)`` actions. ``gap(rank, action)``, when given, is added
    between the rank becoming free (its previous action's end, or 0) and the action. ``pairs``
    are overlapped ``(forward, backward)`` pairs (:attr:`Schedule.pairs`). Raises
    :class:`ScheduleError` on a deadlock, naming each blocked rank's next action and what it
    waits for.
    """
    _validate(orders, placement)
    held = _validate_pairs(orders, placement, pairs) if pairs else {}
    dur = _duration_fn(duration)
    if callable(comm_latency):
        comm = comm_latency
    else:
        latency = float(comm_latency)
        if latency < 0:
            raise ScheduleError("communication latency must be non-negative")
        comm = None
    num_ranks = len(orders)
    last_stage = len(placement) - 1
    # Produced keys are ints: (stage * mb_stride + microbatch) * 3 + channel, channel 0 = F
    # done, 1 = input gradient done (by B or I), 2 = I done (what W needs).
    stride = 1 + max((a.microbatch for o in orders for a in o), default=0)
    end_of: dict[int, float] = {}
    # what other ranks see: the same as end_of, except for a pair's forward until the pair ends
    remote_of: dict[int, float] = {} if held else end_of
    release: dict[Action, tuple[int, ...]] = {}  # pair's backward -> its forward's outputs
    rank_of: dict[int, int] = {}
    action_of: dict[int, Action] = {}
    waiting: dict[int, list[int]] = defaultdict(list)
    ptr = [0] * num_ranks
    free = [0.0] * num_ranks
    busy = [0.0] * num_ranks
    per_rank: list[list[ReplayedAction]] = [[] for _ in range(num_ranks)]
    blocked_on: dict[int, int] = {}
    stack = list(range(num_ranks - 1, -1, -1))
    while stack:
        r = stack.pop()
        order = orders[r]
        n = len(order)
        i = ptr[r]
        t_free = free[r]
        out = per_rank[r]
        blocked_on.pop(r, None)
        while i < n:
            a = order[i]
            k = a.kind
            base = (a.stage * stride + a.microbatch) * 3
            if k == "F":
                deps: tuple[int, ...] = (base - 3 * stride,) if a.stage > 0 else ()
            elif k == "W":
                deps = (base + 2,)
            elif a.stage < last_stage:
                deps = (base, base + 3 * stride + 1)
            else:
                deps = (base,)
            start = t_free + (float(gap(r, a)) if gap is not None else 0.0)
            missing = -1
            for key in deps:
                t = end_of.get(key)
                if t is not None and rank_of[key] != r:
                    t = remote_of.get(key)
                    if t is not None:
                        t += comm(action_of[key], a) if comm is not None else latency
                if t is None:
                    missing = key
                    break
                if t > start:
                    start = t
            if missing >= 0:
                waiting[missing].append(r)
                blocked_on[r] = missing
                break
            d = float(dur(r, a))
            if d < 0:
                raise ScheduleError(f"negative duration {d} for {a} on rank {r}")
            t_free = start + d
            out.append(ReplayedAction(r, a, start, t_free))
            busy[r] += d
            i += 1
            if k == "F":
                produced: tuple[int, ...] = (base,)
            elif k == "B":
                produced = (base + 1,)
            elif k == "I":
                produced = (base + 1, base + 2)
            else:
                produced = ()
            partner = held.get(a) if held else None
            for key in produced:
                end_of[key] = t_free
                rank_of[key] = r
                if held and partner is None:
                    remote_of[key] = t_free
                if comm is not None:
                    action_of[key] = a
                woken = waiting.pop(key, None)
                if woken:
                    stack.extend(woken)
            if partner is not None:
                release[partner] = produced
            elif held and a in release:  # the pair ends: its forward's outputs leave the rank
                for key in release.pop(a):
                    remote_of[key] = t_free
                    woken = waiting.pop(key, None)
                    if woken:
                        stack.extend(woken)
        ptr[r] = i
        free[r] = t_free
    stuck = [r for r in range(num_ranks) if ptr[r] < len(orders[r])]
    if stuck:
        raise ScheduleError(_deadlock_message(orders, ptr, blocked_on, stuck, stride))
    actions = tuple(x for lst in per_rank for x in lst)
    if actions:
        t0 = min(x.start for x in actions)
        makespan = max(x.end for x in actions) - t0
    else:
        t0, makespan = 0.0, 0.0
    rank_bubble = tuple(
        (1.0 - busy[r] / makespan) if makespan > 0 else 0.0 for r in range(num_ranks)
    )
    bubble = sum(rank_bubble) / num_ranks if num_ranks else 0.0
    return ReplayResult(
        actions=actions,
        makespan=makespan,
        rank_bubble=rank_bubble,
        bubble=bubble,
        peak_inflight=peak_inflight_of_orders(orders, placement),
        rank_busy=tuple(busy),
        window_start=t0,
    )


def _key_name(key: int, stride: int, present: set[tuple[int, str, int]]) -> str:
    cell, channel = divmod(key, 3)
    s, m = divmod(cell, stride)
    kind = ("F", "G", "I")[channel]
    if kind == "G":
        names = [f"{s}{k}{m}" for k in ("B", "I") if (s, k, m) in present]
        if names:
            return names[0]
        return f"{s}B{m} or {s}I{m}, which no rank runs"
    name = f"{s}{kind}{m}"
    return name if (s, kind, m) in present else f"{name}, which no rank runs"


def _deadlock_message(
    orders: Sequence[Sequence[Action]],
    ptr: list[int],
    blocked_on: dict[int, int],
    stuck: list[int],
    stride: int,
) -> str:
    present = {(a.stage, a.kind, a.microbatch) for o in orders for a in o}
    parts = []
    for r in stuck:
        a = orders[r][ptr[r]]
        key = blocked_on.get(r)
        need = _key_name(key, stride, present) if key is not None else "?"
        parts.append(f"rank {r} waits for {a} (needs {need})")
    return "deadlock: " + ", ".join(parts)


def peak_inflight_of_orders(
    orders: Sequence[Sequence[Action]], placement: Sequence[int]
) -> dict[int, int]:
    """Per stage, the maximum over the order of (#F done - #B-or-I done): the number of
    microbatches whose activations the stage holds. Depends only on the orders."""
    cur = [0] * len(placement)
    peak = [0] * len(placement)
    for order in orders:
        for a in order:
            if a.kind == "F":
                cur[a.stage] += 1
                if cur[a.stage] > peak[a.stage]:
                    peak[a.stage] = cur[a.stage]
            elif a.kind in ("B", "I"):
                cur[a.stage] -= 1
    return {s: peak[s] for s in range(len(placement))}
