"""The catalogue: structure of every schedule's orders, constraints, aliases, detection."""

from __future__ import annotations

from collections import Counter

import pytest

from pipeaudit.actions import Action
from pipeaudit.errors import ScheduleError
from pipeaudit.schedules import (
    SCHEDULE_NAMES,
    build_schedule,
    canonical_name,
    detect_schedule,
    loop_placement,
    theory,
    order_differences,
    v_placement,
)

MULTI = {"interleaved-1f1b", "looped-bfs", "interleaved-zb"}


def configs():
    """Every valid (name, P, M, v) in a small grid."""
    for name in SCHEDULE_NAMES:
        for P in range(1, 6):
            for M in range(1, 2 * P + 4):
                for v in ((1, 2, 3) if name in MULTI else (None,)):
                    try:
                        yield build_schedule(name, P, M, v)
                    except ScheduleError:
                        continue


ALL = list(configs())


def test_grid_covers_every_schedule():
    assert {s.name for s in ALL} == set(SCHEDULE_NAMES)
    assert len(ALL) > 400


@pytest.mark.parametrize("name", SCHEDULE_NAMES)
def test_every_action_exactly_once_on_the_right_rank(name):
    for sched in (s for s in ALL if s.name == name):
        _check_structure(sched)


def _check_structure(sched):
    P, M, S = sched.num_ranks, sched.num_microbatches, sched.num_stages
    assert len(sched.placement) == P * sched.chunks == S
    assert len(sched.orders) == P
    counts = Counter((a.stage, a.kind, a.microbatch) for o in sched.orders for a in o)
    assert all(n == 1 for n in counts.values()), [k for k, n in counts.items() if n > 1]
    for r, order in enumerate(sched.orders):
        for a in order:
            assert sched.placement[a.stage] == r, f"{a} on rank {r}"
            assert 0 <= a.microbatch < M
    for s in range(S):
        for m in range(M):
            assert counts[(s, "F", m)] == 1
            b, i, w = counts[(s, "B", m)], counts[(s, "I", m)], counts[(s, "W", m)]
            assert b + i == 1 and i == w, (s, m, b, i, w)
            if not sched.split_backward:
                assert i == 0
    if sched.name in ("zb-h1", "zb-h2", "interleaved-zb", "zbv"):
        assert not any(a.kind == "B" for o in sched.orders for a in o)
    # what schedule detection's screen relies on (audit.schedule_fit._may_fit): each rank's
    # order runs every stage placed on it, and only the schedule's declared kinds
    from pipeaudit.schedules.catalogue import CATALOGUE

    kinds = set(CATALOGUE[sched.name].kinds)
    for r, order in enumerate(sched.orders):
        assert {a.kind for a in order} <= kinds, (r, kinds)
        assert {s for s in range(S) if sched.placement[s] == r} <= {a.stage for a in order}


@pytest.mark.parametrize("name", SCHEDULE_NAMES)
def test_same_stage_order_is_causal(name):
    """On a stage: F(m) before B/I(m) before W(m)."""
    for order in (o for s in ALL if s.name == name for o in s.orders):
        pos = {(a.stage, a.kind, a.microbatch): i for i, a in enumerate(order)}
        for (s, k, m), i in pos.items():
            if k in "BI":
                assert pos[(s, "F", m)] < i
            if k == "W":
                assert pos[(s, "I", m)] < i


def test_placements():
    assert loop_placement(4, 2) == (0, 1, 2, 3, 0, 1, 2, 3)
    assert v_placement(4) == (0, 1, 2, 3, 3, 2, 1, 0)
    assert build_schedule("zbv", 4, 8).placement == v_placement(4)
    assert build_schedule("dualpipev", 4, 8).placement == v_placement(4)
    assert build_schedule("interleaved-1f1b", 4, 8, 3).placement == loop_placement(4, 3)


def test_small_orders_by_hand():
    g = build_schedule("gpipe", 2, 2)
    assert [str(a) for a in g.orders[1]] == ["1F0", "1F1", "1B0", "1B1"]
    o = build_schedule("1f1b", 3, 4)
    assert [str(a) for a in o.orders[0]] == ["0F0", "0F1", "0F2", "0B0", "0F3", "0B1", "0B2", "0B3"]
    assert [str(a) for a in o.orders[2]] == ["2F0", "2B0", "2F1", "2B1", "2F2", "2B2", "2F3", "2B3"]
    n = build_schedule("naive", 2, 2)
    assert [str(a) for a in n.orders[0]] == ["0F0", "0B0", "0F1", "0B1"]
    e = build_schedule("eager-1f1b", 3, 6)
    assert [str(a) for a in e.orders[0][:6]] == ["0F0", "0F1", "0F2", "0F3", "0F4", "0B0"]
    bfs = build_schedule("looped-bfs", 2, 2, 2)
    assert [str(a) for a in bfs.orders[0]] == ["0F0", "0F1", "2F0", "2F1", "2B1", "2B0", "0B1", "0B0"]
    d = build_schedule("dualpipev", 2, 4)
    assert any(a.kind == "B" for a in d.orders[0]) and any(a.kind == "I" for a in d.orders[0])


def test_zb_h1_is_torch_interleaved_zb_with_one_chunk():
    compared = 0
    for P in range(1, 6):
        for M in range(1, 12):
            try:
                torch_zb = build_schedule("interleaved-zb", P, M, 1)
            except ScheduleError:  # torch's rounds rule; with one chunk zb-h1 does not need it
                build_schedule("zb-h1", P, M)
                continue
            assert build_schedule("zb-h1", P, M).orders == torch_zb.orders
            compared += 1
    assert compared > 40


def test_torch_interleaved_with_one_chunk_is_eager_1f1b():
    for P in range(1, 6):
        for M in range(P, 3 * P):
            try:
                inter = build_schedule("interleaved-1f1b", P, M, 1)
            except ScheduleError:
                continue
            assert inter.orders == build_schedule("eager-1f1b", P, M).orders


@pytest.mark.parametrize("alias,canon", [
    ("interleaved", "interleaved-1f1b"), ("Interleaved1F1B", "interleaved-1f1b"),
    ("zb-v", "zbv"), ("ZBVZeroBubble", "zbv"), ("zb1p", "interleaved-zb"),
    ("InterleavedZeroBubble", "interleaved-zb"), ("ScheduleGPipe", "gpipe"), ("1F1B", "1f1b"),
    ("LoopedBFS", "looped-bfs"), ("DualPipeV", "dualpipev"), ("zb_h2", "zb-h2"),
    ("Eager1F1B", "eager-1f1b"),
])
def test_aliases(alias, canon):
    assert canonical_name(alias) == canon


@pytest.mark.parametrize("args,fragment", [
    (("pipedream-2bw", 4, 8), "unknown schedule 'pipedream-2bw'"),
    (("1f1b", 4, 8, 2), "one stage per rank"),
    (("zbv", 4, 8, 3), "exactly 2 stages per rank"),
    (("dualpipev", 4, 7), "M >= 2P = 8"),
    (("interleaved-1f1b", 4, 9, 2), "multiple of max(1, M // P) = 2"),
    (("interleaved-zb", 4, 9, 2), "multiple of max(1, M // P) = 2"),
    (("gpipe", 0, 8), "P must be an integer >= 1, got 0"),
    (("gpipe", 4, 0), "M must be an integer >= 1, got 0"),
])
def test_constraints_have_clear_messages(args, fragment):
    with pytest.raises(ScheduleError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        build_schedule(*args)


def test_1f1b_with_fewer_microbatches_than_ranks():
    """torch's Schedule1F1B refuses M < P (the harness says so); DeepSpeed and Megatron-core run
    it, and the analysis reads it: GPipe's order but on the last stage, which alternates."""
    from pipeaudit.schedules.catalogue import HARNESS, config_problem

    assert "M >= P" in config_problem("1f1b", 4, 3, 1, HARNESS)
    assert "--microbatches 3" in config_problem("1f1b", 4, 3, 1, HARNESS)
    s = build_schedule("1f1b", 4, 2)
    g = build_schedule("gpipe", 4, 2)
    assert s.orders[:3] == g.orders[:3]
    assert [(a.kind, a.microbatch) for a in s.orders[3]] == [("F", 0), ("B", 0), ("F", 1), ("B", 1)]
    assert theory("1f1b", 4, 2).bubble == pytest.approx(3 / 5)


def test_defaults_for_chunks():
    assert build_schedule("interleaved", 4, 8).chunks == 2
    assert build_schedule("zbv", 4, 8).chunks == 2
    assert build_schedule("1f1b", 4, 8).chunks == 1


def test_detect_schedule():
    s = build_schedule("1f1b", 4, 8)
    assert detect_schedule(s.orders, s.placement, 8) == ["1f1b"]
    s = build_schedule("interleaved-1f1b", 4, 8, 2)
    assert detect_schedule(s.orders, s.placement, 8) == ["interleaved-1f1b"]
    s = build_schedule("zb-h1", 4, 8)
    assert detect_schedule(s.orders, s.placement, 8) == ["zb-h1", "interleaved-zb"]
    s = build_schedule("dualpipev", 2, 4)
    assert detect_schedule(s.orders, s.placement, 4) == ["dualpipev"]
    # with one microbatch every one-chunk F-then-B schedule is the same order
    s = build_schedule("gpipe", 3, 1)
    assert {"gpipe", "eager-1f1b", "naive"} <= set(detect_schedule(s.orders, s.placement, 1))
    # a swapped pair is no catalogue schedule
    orders = [list(o) for o in build_schedule("1f1b", 4, 8).orders]
    orders[0][4], orders[0][5] = orders[0][5], orders[0][4]
    assert detect_schedule(orders, loop_placement(4, 1), 8) == []
    assert detect_schedule([], [], 8) == []
    assert detect_schedule([[Action(0, "F", 0)]] * 2, [0, 1, 0], 1) == []


def test_order_differences_points_at_first_divergence():
    s = build_schedule("1f1b", 2, 3)
    observed = [list(o) for o in s.orders]
    observed[1] = observed[1][:-1]
    diffs = order_differences(s, observed)
    assert len(diffs) == 1 and diffs[0].startswith("rank 1: position 5: expected 1B2, observed <end>")
    assert order_differences(s, s.orders) == []
