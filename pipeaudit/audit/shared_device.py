"""Theory and replay of a pipeline whose stages take turns on one device.

A single-process run without a device per stage (every stage on the CPU, or on one GPU)
computes one action at a time, whatever the schedule: the device works through the
program's actions in the order the program issued them. Its ideal step is the sum of the
actions' compute, and stage s idles for the others' share of it, so the bubble of a rank is
``1 - C_s / sum(C)``: ``(P-1)/P`` with equal stages. The schedule's own theory (a device per
stage) would call that bubble a loss it is not; the audit measures such a run against this.
"""

from __future__ import annotations

from dataclasses import replace

from pipeaudit.schedules import peak_inflight_of_orders
from pipeaudit.schedules.closed_forms import Theory
from pipeaudit.schedules.replay import ReplayedAction, ReplayResult
from pipeaudit.timeline.model import Timeline


def serial_replay(tl: Timeline, step: int, representatives: list[int], place: list[int]
                  ) -> ReplayResult:
    """Step ``step`` replayed on one device: the representatives' actions in the order they
    were issued (their start times), each taking its measured compute, back to back."""
    arr = tl.action_arrays()
    index = {x.rank: i for i, x in enumerate(tl.ranks)}
    issued: list[tuple[int, int, object, float]] = []
    orders = []
    for pos, r in enumerate(representatives):
        sl = arr.rows(index[r], step)
        order = arr.order(index[r], step)
        orders.append(order)
        for act, start, compute in zip(order, arr.start[sl].tolist(), arr.compute_ns[sl].tolist()):
            issued.append((int(start), pos, act, float(compute)))
    issued.sort(key=lambda x: (x[0], x[1]))
    busy = [0.0] * len(representatives)
    done, t = [], 0.0
    for _, pos, act, compute in issued:
        done.append(ReplayedAction(pos, act, t, t + compute))  # type: ignore[arg-type]
        t += compute
        busy[pos] += compute
    rank_bubble = tuple(1.0 - b / t if t > 0 else 0.0 for b in busy)
    return ReplayResult(actions=tuple(done), makespan=t, rank_bubble=rank_bubble,
                        bubble=sum(rank_bubble) / len(rank_bubble) if rank_bubble else 0.0,
                        peak_inflight=peak_inflight_of_orders(orders, place),
                        rank_busy=tuple(busy), window_start=0.0)


def shared_device_theory(th: Theory, P: int, device: str, notes: list[str]) -> Theory:
    """The theory of ``P`` equal stages taking turns on ``device``: bubble (P-1)/P, bubble
    time (P-1) x one stage's compute. ``notes`` gets the schedule's own figure (a device per
    stage) for comparison."""
    own = f"{th.bubble:.1%} ({th.formula})" if th.bubble is not None else f"({th.formula})"
    notes.append(f"theory and replay ideal are those of {P} stages taking turns on {device}: "
                 f"(P-1)/P = {(P - 1) / P:.1%}; with a device per stage the schedule's theory "
                 f"is {own}")
    return replace(th, bubble=(P - 1) / P, formula=f"(P-1)/P, stages share {device}",
                   ratio=float(P - 1), ratio_formula="(P-1), stages share one device",
                   bubble_time=th.busy * (P - 1) if th.busy else None, published=None,
                   notes=f"{P} equal stages computing one at a time on {device}")
