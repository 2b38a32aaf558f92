"""Published bubble formulas beside the per-step theory: values, explanations, reports.

Each published value is recomputed here from the source's formula with the durations the test
chooses, and checked against the replay where the explanation says they agree.
"""

from __future__ import annotations

import itertools

import pytest

from pipeaudit.schedules import build_schedule, replay, theory, uniform_durations


# ------------------------------------------------------------------- the must-show case


@pytest.mark.parametrize("P,M", [(2, 4), (3, 7), (4, 8), (5, 12)])
@pytest.mark.parametrize("tf,tw", [(1.0, 1.0), (1.0, 0.5), (0.7, 0.2), (2.0, 0.0)])
def test_dualpipev_published_equals_the_replay_with_pairs_as_torch_runs_them(P, M, tf, tw):
    """With T_F = T_I and T_W <= T_F (the formula's own assumptions) DeepSeek's
    (PP/2-1)(F&B+B-3W) is exactly the replay; a replay that let a pair's forward output leave
    before its backward ran is (P-1)T_F per rank lower: that was the old 0.0588."""
    ti = tf
    tb = ti + tw
    s = build_schedule("dualpipev", P, M)
    fused = replay(s.orders, s.placement, uniform_durations(tf, tb, tw), pairs=s.pairs)
    loose = replay(s.orders, s.placement, uniform_durations(tf, tb, tw))
    busy = 2 * M * (tf + tb)
    published = (P - 1) * ((tf + tb) + tb - 3 * tw)
    assert fused.makespan - busy == pytest.approx(published)
    assert fused.makespan - loose.makespan == pytest.approx((P - 1) * tf)
    th = theory("dualpipev", P, M, 2, tf, tb, tw)
    assert th.published.bubble_time == pytest.approx(published)
    assert th.bubble_time == pytest.approx(published) and th.published.holds


def test_dualpipev_outside_its_assumptions_says_so():
    th = theory("dualpipev", 4, 8, 2, t_f=1.0, t_b=3.0, t_w=2.0)  # T_W > T_F
    assert not th.published.holds and "T_W > T_F" in th.published.differs
    s = build_schedule("dualpipev", 4, 8)
    r = replay(s.orders, s.placement, uniform_durations(1.0, 3.0, 2.0), pairs=s.pairs)
    assert r.makespan - 2 * 8 * 4.0 == pytest.approx(2 * 3 * 1.0)  # (P-1)2T_F, as stated
    assert th.published.bubble_time < 2 * 3 * 1.0


# ------------------------------------------------------------------------ zero bubble


def test_1f1b_names_ratio_and_fraction():
    th = theory("1f1b", 4, 8, 1, 1.0, 2.0)
    assert th.published.value == pytest.approx(th.bubble)  # the same bubble time
    assert th.published.ratio == pytest.approx(3 / 8)
    assert "ratio, not the fraction of the step" in th.published.differs


def test_schedules_without_a_published_formula():
    for name, v in (("naive", 1), ("eager-1f1b", 1), ("looped-bfs", 2), ("interleaved-zb", 2),
                    ("1f1b-v", 2)):
        assert theory(name, 4, 8, v).published is None, name
    assert theory("interleaved-zb", 4, 8, 1).published.bubble_time == pytest.approx(
        theory("zb-h1", 4, 8, 1).published.bubble_time)


# ------------------------------------------------------------------------------ analyze


def test_every_published_source_is_named_and_every_value_is_a_fraction():
    durations = [(1.0, 2.0, 1.0), (0.5, 1.5, 0.25), (2.0, 2.0, 0.5)]
    for name, (tf, tb, tw) in itertools.product(
            ("gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-h2", "zbv", "dualpipev"), durations):
        v = 2 if name in ("interleaved-1f1b", "zbv", "dualpipev") else 1
        pub = theory(name, 4, 8, v, tf, tb, tw).published
        assert pub.source and pub.formula and pub.assumptions and pub.differs, name
        assert 0 <= pub.value < 1 or pub.value < 0 and not pub.holds, name
        assert pub.to_dict()["value_is"] == "fraction of the step"
