"""Orders built by a greedy list scheduler in unit time (used for ZB-H2).

The ZB paper hand-crafts ZB-H2 from three rules, which this scheduler applies with
T_F = T_I = T_W = 1 and zero communication, then records the order each rank ran:

1. an input-gradient pass I is run as soon as it is ready (it is on the critical path);
2. otherwise a forward F, while stage s holds fewer than its limit of in-flight
   microbatches (2(P-s)-1 for ZB-H2);
3. otherwise the oldest pending weight pass W (W passes fill what would be bubbles).

The order, not the timing, is the schedule: replaying it with other durations is legitimate.
"""

from __future__ import annotations

import heapq
from functools import lru_cache

from pipeaudit.actions import Action


def greedy_zb_orders(num_ranks: int, num_microbatches: int, limits: tuple[int, ...],
                     w_caps: tuple[int, ...] | None = None) -> tuple[tuple[Action, ...], ...]:
    """Per-rank orders for one stage per rank, split backward, in-flight limits per stage."""
    P, M = num_ranks, num_microbatches
    f_end: dict[tuple[int, int], int] = {}  # (stage, mb) -> end time of F
    g_end: dict[tuple[int, int], int] = {}  # (stage, mb) -> end time of I
    next_f = [0] * P
    next_i = [0] * P
    pending_w: list[list[int]] = [[] for _ in range(P)]
    busy_until = [0] * P
    orders: list[list[Action]] = [[] for _ in range(P)]
    events: list[int] = [0]
    remaining = 3 * P * M
    while remaining:
        t = heapq.heappop(events)
        while events and events[0] == t:
            heapq.heappop(events)
        for r in range(P):
            if busy_until[r] > t:
                continue
            i_m, f_m = next_i[r], next_f[r]
            i_ready = (
                i_m < M
                and f_end.get((r, i_m), t + 1) <= t
                and (r == P - 1 or g_end.get((r + 1, i_m), t + 1) <= t)
            )
            f_ready = (
                f_m < M
                and f_m - i_m < limits[r]
                and (r == 0 or f_end.get((r - 1, f_m), t + 1) <= t)
            )
            if w_caps is not None and len(pending_w[r]) >= w_caps[r]:
                orders[r].append(Action(r, "W", pending_w[r].pop(0)))
            elif i_ready:
                orders[r].append(Action(r, "I", i_m))
                g_end[(r, i_m)] = t + 1
                pending_w[r].append(i_m)
                next_i[r] += 1
            elif f_ready:
                orders[r].append(Action(r, "F", f_m))
                f_end[(r, f_m)] = t + 1
                next_f[r] += 1
            elif pending_w[r]:
                orders[r].append(Action(r, "W", pending_w[r].pop(0)))
            else:
                continue
            busy_until[r] = t + 1
            remaining -= 1
            heapq.heappush(events, t + 1)
        if not events and remaining:  # nobody busy: wake at the next integer step
            if t > 3 * P * M + 4 * P + 8:  # cannot happen for valid limits; never spin forever
                raise RuntimeError(f"greedy schedule stalled at t={t} (P={P}, M={M}, limits={limits})")
            heapq.heappush(events, t + 1)
    return tuple(tuple(o) for o in orders)


@lru_cache(maxsize=2)  # a schedule's ranks ask in turn; the catalogue caches the schedule
def zb_h2_orders(num_ranks: int, num_microbatches: int) -> tuple[tuple[Action, ...], ...]:
    """ZB-H2: up to 2(P-s)-1 microbatches in flight on stage s."""
    limits = tuple(2 * (num_ranks - s) - 1 for s in range(num_ranks))
    w_caps = tuple(num_ranks + s for s in range(num_ranks))
    return greedy_zb_orders(num_ranks, num_microbatches, limits, w_caps)
