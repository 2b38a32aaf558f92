"""Reorder a schedule's warm-up and cool-down (the optional fourth step of building a
schedule from a building block).

The peak memory of a repeated block is reached in its steady phase; the warm-up and the
cool-down hold less, so their passes can run earlier without raising any peak. The rule used
here: run the schedule in time with the block's pass durations and free communication; when a
rank is free and the next pass of its order cannot start, it may run a later pass of the same
phase instead (warm-up: the passes before the rank's first B or I; cool-down: those after its
last F), the first one in order whose inputs are there, keeping each (stage, kind)'s
microbatches in order. Warm-up passes are forwards only, cool-down passes backward and weight
passes only, so the rank's in-flight count never exceeds what the order reaches anyway. The
order the ranks actually ran is the new schedule.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import replace

from pipeaudit.actions import Action
from pipeaudit.errors import ScheduleError
from pipeaudit.schedules.model import Schedule, as_orders


def _phases(order: tuple[Action, ...]) -> dict[Action, str]:
    first_back = next((i for i, a in enumerate(order) if a.kind in ("B", "I")), len(order))
    last_fwd = max((i for i, a in enumerate(order) if a.kind == "F"), default=-1)
    return {a: "warm-up" if i < first_back else ("cool-down" if i > last_fwd else "steady")
            for i, a in enumerate(order)}


def _needs(a: Action, last_stage: int) -> tuple[tuple[str, int, int], ...]:
    s, m = a.stage, a.microbatch
    if a.kind == "F":
        return (("F", s - 1, m),) if s > 0 else ()
    if a.kind == "W":
        return (("I", s, m),)
    return (("F", s, m),) + ((("G", s + 1, m),) if s < last_stage else ())


def _makes(a: Action) -> tuple[tuple[str, int, int], ...]:
    s, m = a.stage, a.microbatch
    return {"F": (("F", s, m),), "B": (("G", s, m),), "I": (("G", s, m), ("I", s, m)),
            "W": ()}[a.kind]


def reorder_ends(schedule: Schedule, durations: Mapping[str, float]) -> Schedule:
    """``schedule`` with its warm-up and cool-down passes run as early as their inputs allow
    (module docstring). Overlapped pairs are not supported (none of the block-built
    schedules has them)."""
    if schedule.pairs:
        raise ScheduleError("reorder: schedules with overlapped pairs are not supported")
    last = schedule.num_stages - 1
    phase: dict[Action, str] = {}
    for order in schedule.orders:
        phase.update(_phases(order))
    pending = [list(o) for o in schedule.orders]
    ran: list[list[Action]] = [[] for _ in pending]
    done: dict[tuple[str, int, int], float] = {}
    free = [0.0] * len(pending)
    events = [0.0]
    left = sum(len(p) for p in pending)
    while left:
        t = heapq.heappop(events)
        while events and events[0] <= t:
            heapq.heappop(events)
        for r, todo in enumerate(pending):
            if free[r] > t or not todo:
                continue
            pick = _pick(todo, phase, done, t, last)
            if pick is None:
                continue
            a = todo.pop(pick)
            ran[r].append(a)
            free[r] = t + float(durations[a.kind])
            for key in _makes(a):
                done[key] = free[r]
            left -= 1
            heapq.heappush(events, free[r])
        if not events:
            later = [f for f in free if f > t]
            if not later:
                raise ScheduleError("reorder: the schedule deadlocks")  # pragma: no cover
            heapq.heappush(events, min(later))
    return replace(schedule, orders=as_orders(ran))


def _pick(todo: list[Action], phase: Mapping[Action, str], done: Mapping, t: float,
          last: int) -> int | None:
    """Index of the pass to run now: the next one if ready, else the first ready later pass
    of the same warm-up or cool-down phase (each (stage, kind) in microbatch order)."""
    head_phase = phase[todo[0]]
    seen: set[tuple[int, str]] = set()
    for i, a in enumerate(todo):
        if i and (head_phase == "steady" or phase[a] != head_phase):
            break
        key = (a.stage, a.kind)
        if key in seen:
            continue
        seen.add(key)
        if all(done.get(n, t + 1.0) <= t for n in _needs(a, last)):
            return i
    return None
