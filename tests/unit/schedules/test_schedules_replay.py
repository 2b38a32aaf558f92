"""Replay: closed forms as properties, causality, no overlap, memory, deadlocks, speed."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeaudit.actions import Action
from pipeaudit.errors import ScheduleError
from pipeaudit.schedules import (
    SCHEDULE_NAMES,
    build_schedule,
    peak_inflight_of_orders,
    replay,
    uniform_durations,
)

TOL = 1e-9
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
durations = st.floats(min_value=0.05, max_value=5.0, allow_nan=False, allow_infinity=False)


def gpipe_like(P, M):
    return (P - 1) / (M + P - 1)


# ----------------------------------------------------------------------------- closed forms
# Assumption for all of these: every stage's F takes t_f and every B takes t_b (uniform
# per-stage durations) and communication is free. Under it the closed forms hold *exactly*
# for any positive t_f, t_b (not only t_b = 2 t_f), which is what these properties check.


@FAST
@given(P=st.integers(1, 8), M=st.integers(1, 24), tf=durations, tb=durations)
def test_gpipe_bubble_is_exact(P, M, tf, tb):
    s = build_schedule("gpipe", P, M)
    r = replay(s.orders, s.placement, uniform_durations(tf, tb))
    assert r.bubble == pytest.approx(gpipe_like(P, M), abs=TOL)
    for b in r.rank_bubble:  # equal work per rank: every rank has the same bubble
        assert b == pytest.approx(gpipe_like(P, M), abs=TOL)


@FAST
@given(P=st.integers(1, 8), extra=st.integers(0, 24), tf=durations, tb=durations,
       eager=st.booleans())
def test_1f1b_bubble_is_exact(P, extra, tf, tb, eager):
    M = P + extra  # 1f1b needs M >= P (torch's rule)
    s = build_schedule("eager-1f1b" if eager else "1f1b", P, M)
    r = replay(s.orders, s.placement, uniform_durations(tf, tb))
    assert r.bubble == pytest.approx(gpipe_like(P, M), abs=TOL)
    assert max(r.rank_bubble) == pytest.approx(min(r.rank_bubble), abs=TOL)


@FAST
@given(P=st.integers(1, 8), M=st.integers(1, 16), tf=durations, tb=durations)
def test_naive_bubble_is_p_minus_1_over_p(P, M, tf, tb):
    s = build_schedule("naive", P, M)
    r = replay(s.orders, s.placement, uniform_durations(tf, tb))
    assert r.bubble == pytest.approx((P - 1) / P, abs=TOL)


@FAST
@given(P=st.integers(1, 6), rounds=st.integers(1, 4), v=st.integers(1, 4), tf=durations,
       tb=durations, bfs=st.booleans())
def test_interleaved_bubble_is_exact(P, rounds, v, tf, tb, bfs):
    # Assumptions: uniform per-chunk durations (every chunk's F takes tf, B takes tb), free
    # communication, M a multiple of P (M >= P; Megatron's classic condition).
    M = P * rounds
    s = build_schedule("looped-bfs" if bfs else "interleaved-1f1b", P, M, v)
    r = replay(s.orders, s.placement, uniform_durations(tf, tb))
    assert r.bubble == pytest.approx((P - 1) / (v * M + P - 1), abs=TOL)


@FAST
@given(P=st.integers(2, 6), M=st.integers(1, 5), v=st.integers(1, 3), tf=durations, tb=durations)
def test_interleaved_with_fewer_microbatches_than_ranks(P, M, v, tf, tb):
    # M < P: each chunk round trip waits for the pipeline; derived form 1 - vM/(vP+M-1)
    M = min(M, P - 1)
    for name in ("interleaved-1f1b", "looped-bfs"):
        s = build_schedule(name, P, M, v)
        r = replay(s.orders, s.placement, uniform_durations(tf, tb))
        assert r.bubble == pytest.approx(1 - v * M / (v * P + M - 1), abs=TOL)


# ----------------------------------------------------------------------- replay invariants


def _valid_configs():
    out = []
    for name in SCHEDULE_NAMES:
        for P, M in ((1, 3), (2, 4), (3, 6), (4, 8), (4, 5), (3, 2), (5, 10)):
            for v in ((1, 2, 3) if name in ("interleaved-1f1b", "looped-bfs", "interleaved-zb") else (None,)):
                try:
                    out.append(build_schedule(name, P, M, v))
                except ScheduleError:
                    pass
    return out


CONFIGS = _valid_configs()


def _check_invariants(sched, dur, comm):
    r = replay(sched.orders, sched.placement, dur, comm)
    ends = {}
    for a in r.actions:
        assert a.end >= a.start
        ends[(a.action.stage, a.action.kind, a.action.microbatch)] = (a.end, a.rank)
    # no rank ever runs two actions at once, and each rank follows its order
    for rank in range(sched.num_ranks):
        mine = r.of_rank(rank)
        assert [a.action for a in mine] == list(sched.orders[rank])
        for x, y in zip(mine, mine[1:]):
            assert y.start >= x.end - TOL
    # every dependency is respected, with the latency on cross-rank edges
    last = sched.num_stages - 1
    for a in r.actions:
        s, k, m = a.action.stage, a.action.kind, a.action.microbatch
        deps = []
        if k == "F" and s > 0:
            deps.append(("F", s - 1))
        if k in "BI":
            deps.append(("F", s))
            if s < last:
                deps.append(("B", s + 1) if (s + 1, "B", m) in ends else ("I", s + 1))
        if k == "W":
            deps.append(("I", s))
        for dk, ds in deps:
            end, rank = ends[(ds, dk, m)]
            lat = comm if rank != a.rank else 0.0
            assert a.start >= end + lat - TOL, (a, dk, ds)
    # bubble definition
    t0 = min(a.start for a in r.actions)
    t1 = max(a.end for a in r.actions)
    assert r.makespan == pytest.approx(t1 - t0)
    for rank in range(sched.num_ranks):
        busy = sum(a.end - a.start for a in r.of_rank(rank))
        assert r.rank_bubble[rank] == pytest.approx(1 - busy / r.makespan)
    assert r.bubble == pytest.approx(sum(r.rank_bubble) / sched.num_ranks)
    return r


@settings(max_examples=80, deadline=None)
@given(idx=st.integers(0, len(CONFIGS) - 1), tf=durations, tb=durations,
       wfrac=st.floats(0.0, 1.0), comm=st.sampled_from([0.0, 0.0, 0.3, 1.0]))
def test_replay_invariants_hold_for_every_schedule(idx, tf, tb, wfrac, comm):
    _check_invariants(CONFIGS[idx], uniform_durations(tf, tb, tb * wfrac), comm)


def test_replay_invariants_with_per_microbatch_durations():
    # the auditor passes a callable using the microbatch: every action a different length
    for sched in CONFIGS[::3]:
        _check_invariants(sched, lambda r, a: 0.5 + ((a.stage * 7 + a.microbatch * 3 + ord(a.kind)) % 5) / 4, 0.1)


def test_every_schedule_replays_without_deadlock():
    for sched in CONFIGS:
        replay(sched.orders, sched.placement, uniform_durations())


# ---------------------------------------------------------------------------- memory


@given(P=st.integers(1, 8), M=st.integers(1, 24))
@settings(max_examples=60, deadline=None)
def test_peak_inflight_of_gpipe_and_1f1b(P, M):
    g = build_schedule("gpipe", P, M)
    assert peak_inflight_of_orders(g.orders, g.placement) == {s: M for s in range(P)}
    if M >= P:
        o = build_schedule("1f1b", P, M)
        r = replay(o.orders, o.placement, uniform_durations())
        assert r.peak_inflight == {s: min(M, P - s) for s in range(P)}


def test_peak_inflight_counts_i_as_freeing():
    orders = [[Action(0, "F", 0), Action(0, "F", 1), Action(0, "I", 0), Action(0, "F", 2),
               Action(0, "W", 0), Action(0, "I", 1), Action(0, "I", 2), Action(0, "W", 1),
               Action(0, "W", 2)]]
    assert peak_inflight_of_orders(orders, [0]) == {0: 2}


# -------------------------------------------------------------------------- durations


def test_mapping_durations_by_stage_and_kind():
    s = build_schedule("1f1b", 2, 2)
    r = replay(s.orders, s.placement, {(0, "F"): 1.0, (0, "B"): 2.0, (1, "F"): 3.0, (1, "B"): 1.0})
    starts = {str(a.action): a.start for a in r.actions}
    assert starts["1F0"] == 1.0 and starts["1B0"] == 4.0 and starts["0B0"] == 5.0
    with pytest.raises(ScheduleError, match="no duration for stage 1 kind B"):
        replay(s.orders, s.placement, {(0, "F"): 1.0, (0, "B"): 2.0, (1, "F"): 3.0})


def test_comm_latency_callable_sees_producer_and_consumer():
    s = build_schedule("gpipe", 2, 1)
    seen = []

    def lat(src, dst):
        seen.append((str(src), str(dst)))
        return 0.5

    r = replay(s.orders, s.placement, uniform_durations(1, 2), lat)
    assert sorted(seen) == [("0F0", "1F0"), ("1B0", "0B0")]
    assert r.makespan == pytest.approx(1 + 0.5 + 1 + 2 + 0.5 + 2)


def test_uniform_durations_split():
    d = uniform_durations(1.0, 3.0, 1.0)
    assert [d(0, Action(0, k, 0)) for k in "FBIW"] == [1.0, 3.0, 2.0, 1.0]
    assert uniform_durations(1.0, 2.0)(0, Action(0, "W", 0)) == 1.0
    with pytest.raises(ScheduleError):
        uniform_durations(1.0, 1.0, 2.0)


# ---------------------------------------------------------------------------- deadlocks


def test_deadlock_names_the_blocked_actions():
    # rank 0 wants microbatch 3's gradient before rank 1 will produce it: rank 1 runs 1B3 only
    # after 1F4, which needs 0F4, which rank 0 runs after its 0B3
    orders = [
        [Action(0, "F", m) for m in range(4)] + [Action(0, "B", 3), Action(0, "F", 4)]
        + [Action(0, "B", m) for m in (0, 1, 2, 4)],
        [Action(1, "F", m) for m in range(4)] + [Action(1, "F", 4)]
        + [Action(1, "B", m) for m in range(5)],
    ]
    with pytest.raises(ScheduleError) as exc:
        replay(orders, [0, 1], uniform_durations())
    msg = str(exc.value)
    assert msg == "deadlock: rank 0 waits for 0B3 (needs 1B3), rank 1 waits for 1F4 (needs 0F4)"


def test_deadlock_on_missing_producer():
    orders = [[Action(0, "F", 0), Action(0, "B", 0)], [Action(1, "F", 0)]]
    with pytest.raises(ScheduleError, match=r"rank 0 waits for 0B0 \(needs 1B0 or 1I0, which no rank runs\)"):
        replay(orders, [0, 1], uniform_durations())


def test_deadlock_on_self_order():
    orders = [[Action(0, "B", 0), Action(0, "F", 0)]]
    with pytest.raises(ScheduleError, match=r"rank 0 waits for 0B0 \(needs 0F0\)"):
        replay(orders, [0], uniform_durations())


@pytest.mark.parametrize("orders,placement,fragment", [
    ([[Action(0, "F", 0)], [Action(1, "F", 0)]], [0, 0],
     "rank 1: action 1F0 belongs to stage 1, which is placed on rank 0"),
    ([[Action(2, "F", 0)]], [0, 0], "names stage 2, but there are 2 stages"),
    ([[Action(0, "F", 0), Action(0, "F", 0)]], [0], "appears more than once"),
    ([[Action(0, "F", 0), Action(0, "B", 0), Action(0, "I", 0)]], [0],
     "0B0 and 0I0 both compute stage 0's input gradient for microbatch 0"),
    ([[Action(0, "F", 0)]], [1], "placement names ranks outside"),
])
def test_invalid_orders(orders, placement, fragment):
    with pytest.raises(ScheduleError, match=fragment):
        replay(orders, placement, uniform_durations())


# ------------------------------------------------------------------------------- speed


def test_replay_is_fast_on_large_schedules():
    s = build_schedule("interleaved-1f1b", 16, 256, 4)  # 32768 actions
    t = time.perf_counter()
    r = replay(s.orders, s.placement, lambda rank, a: 1.0 + (a.microbatch % 3) * 0.1)
    elapsed = time.perf_counter() - t
    assert len(r.actions) == s.num_actions == 2 * 16 * 4 * 256
    assert elapsed < 5.0, elapsed  # linear: ~1 s on a loaded 2-core box; quadratic would be minutes
