"""Which catalogue schedule ran: compare observed per-rank orders with the catalogue."""

from __future__ import annotations

from collections.abc import Sequence

from pipeaudit.actions import Action
from pipeaudit.errors import ScheduleError
from pipeaudit.schedules.catalogue import SCHEDULE_NAMES, build_schedule
from pipeaudit.schedules.model import Schedule
from pipeaudit.schedules.torchnames import orders_from_names


def detect_schedule(
    orders_by_rank: Sequence[Sequence[Action]],
    placement: Sequence[int],
    num_microbatches: int,
) -> list[str]:
    """Names of the catalogue schedules whose placement and per-rank orders equal the given
    ones exactly (in :data:`SCHEDULE_NAMES` order); ``[]`` if none.

    Several names can match the same orders (zb-h1 is interleaved-zb with one chunk; with one
    microbatch gpipe and 1f1b coincide).
    """
    num_ranks = len(orders_by_rank)
    if num_ranks == 0 or not placement or len(placement) % num_ranks:
        return []
    chunks = len(placement) // num_ranks
    observed = tuple(tuple(o) for o in orders_by_rank)
    target = tuple(placement)
    found = []
    for name in SCHEDULE_NAMES:
        try:
            sched = build_schedule(name, num_ranks, num_microbatches, chunks)
        except ScheduleError:
            continue
        if sched.placement == target and sched.orders == observed:
            found.append(name)
    return found


def order_differences(schedule: Schedule, orders_by_rank: Sequence[Sequence[Action]],
                      limit: int = 5) -> list[str]:
    """Human-readable differences between ``schedule`` and observed orders ([] if equal):
    for each differing rank, the first position where they part."""
    out: list[str] = []
    if len(orders_by_rank) != schedule.num_ranks:
        out.append(f"{len(orders_by_rank)} ranks observed, the schedule has {schedule.num_ranks}")
    for r, (want, got) in enumerate(zip(schedule.orders, orders_by_rank)):
        got = tuple(got)
        if want == got:
            continue
        i = next((k for k, (a, b) in enumerate(zip(want, got)) if a != b), min(len(want), len(got)))
        w = str(want[i]) if i < len(want) else "<end>"
        g = str(got[i]) if i < len(got) else "<end>"
        out.append(
            f"rank {r}: position {i}: expected {w}, observed {g} "
            f"(expected {len(want)} actions, observed {len(got)})"
        )
        if len(out) >= limit:
            break
    return out


def compare_names_to_catalogue(
    names_by_rank: Sequence[Sequence[str]],
    name: str,
    num_microbatches: int,
    chunks: int | None = None,
) -> list[str]:
    """Compare per-rank profiler names in execution order (``PP:2F0``, ``PP:1I3``,
    ``PP:(0F3;3B1)OVERLAP_F_B``, GPipe's ``Forward i``; communication names are skipped) with
    catalogue schedule ``name``. Returns the differences, ``[]`` when the trace ran exactly the
    catalogue order. Meant for checking real harness traces against the catalogue."""
    sched = build_schedule(name, len(names_by_rank), num_microbatches, chunks)
    return order_differences(sched, orders_from_names(names_by_rank))
