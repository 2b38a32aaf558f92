"""The batched replay ideal (:mod:`pipeaudit.audit.replay_ideal`) against the event loop
(:func:`pipeaudit.schedules.replay.replay`): the same figures for every catalogue order,
several steps at once, and None where the loop refuses (a deadlock)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from pipeaudit.audit.replay_ideal import ReplayGroup, replay_ideals
from pipeaudit.errors import ScheduleError
from pipeaudit.schedules import SCHEDULE_NAMES, build_schedule, replay
from pipeaudit.timeline.columns import KIND_CODE, NO_STEP, ActionArrays


def _arrays(steps: list[list[list]], durations: list[list[list[int]]]) -> ActionArrays:
    """Rows by rank, then step: ``steps[k][r]`` is rank r's order in step k."""
    cols: dict[str, list[int]] = {c: [] for c in ("ri", "stage", "kind", "mb", "step", "ns")}
    P = len(steps[0])
    for r in range(P):
        for k, orders in enumerate(steps):
            for a, ns in zip(orders[r], durations[k][r]):
                for c, x in zip(cols, (r, a.stage, KIND_CODE[a.kind], a.microbatch, k, ns)):
                    cols[c].append(x)
    n = len(cols["ri"])
    i64 = {c: np.asarray(v, dtype=np.int64) for c, v in cols.items()}
    zeros = np.zeros(n, dtype=np.int64)
    return ActionArrays(ranks=list(range(P)), rank_index=i64["ri"], stage=i64["stage"],
                        kind=i64["kind"].astype(np.int8), microbatch=i64["mb"], step=i64["step"],
                        start=zeros, compute_start=zeros, compute_end=i64["ns"],
                        compute_ns=i64["ns"], row=np.arange(n, dtype=np.int64),
                        profiler_step=np.full(n, NO_STEP, dtype=np.int64))


@pytest.mark.parametrize("name", SCHEDULE_NAMES)
def test_batched_replay_equals_the_event_loop(name):
    rng = random.Random(name)
    P, M = 4, 8
    try:
        sched = build_schedule(name, P, M)
    except ScheduleError:
        pytest.skip(f"{name} does not run with P={P}, M={M}")
    if sched.pairs:
        pytest.skip("overlapped pairs are replayed by the event loop")
    orders = [list(o) for o in sched.orders]
    steps = [orders, orders, orders]
    # step 3: the first rank's first action moved to its end, which deadlocks where its
    # other actions wait for it (the event loop refuses: None), else replays as well
    blocked = [list(o) for o in orders]
    blocked[0] = blocked[0][1:] + blocked[0][:1]
    steps.append(blocked)
    durations = [[[rng.randrange(1, 1000) for _ in o] for o in st] for st in steps]
    arr = _arrays(steps, durations)
    groups = [ReplayGroup(k, tuple(range(P)), sched.placement) for k in range(len(steps))]
    got = replay_ideals(arr, groups)
    for k, st in enumerate(steps):
        table = {(r, a): float(ns) for r, o in enumerate(st) for a, ns in zip(o, durations[k][r])}
        try:
            want = replay(st, sched.placement, lambda r, a: table[(r, a)], 0.0)
        except ScheduleError:
            assert got[k] is None, k
            continue
        assert got[k] is not None, k
        assert got[k].makespan == want.makespan
        assert got[k].rank_bubble == want.rank_bubble
        assert got[k].bubble == want.bubble
