"""Every closed form in theory() equals the replay whenever it claims to apply."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeaudit.errors import ScheduleError
from pipeaudit.schedules import CATALOGUE, SCHEDULE_NAMES, build_schedule, replay, theory, uniform_durations

TOL = 1e-9
MULTI = ("interleaved-1f1b", "looped-bfs", "interleaved-zb")
#: schedules with a closed-form bubble (those built from building blocks have none, nor the
#: single-process delayed-backward loop)
CLOSED = tuple(n for n in SCHEDULE_NAMES if CATALOGUE[n].block is None and CATALOGUE[n].closed_form)


def _check(name, P, M, v, tf, tb, tw):
    """Replay ``name`` and compare with its theory. Returns True when a closed form applied."""
    try:
        s = build_schedule(name, P, M, v)
    except ScheduleError:
        return None
    th = theory(name, P, M, s.chunks, tf, tb, tw)
    r = replay(s.orders, s.placement, uniform_durations(tf, tb, tw), pairs=s.pairs)
    assert th.peak_inflight == r.peak_inflight, (name, P, M, v)
    if th.bubble is None:
        return False
    assert r.bubble == pytest.approx(th.bubble, abs=TOL), (name, P, M, v, tf, tb, tw, th.formula)
    assert r.makespan == pytest.approx(th.busy + th.bubble_time, rel=1e-9)
    if th.ratio is not None:
        assert th.ratio == pytest.approx(th.bubble / (1 - th.bubble))
    return True


@pytest.mark.parametrize("name", CLOSED)
def test_theory_matches_replay_on_a_grid(name):
    applied = 0
    times = (0.5, 1.0, 2.0)
    split = build_schedule(name, 2, 4).split_backward
    durs = list(itertools.product(times, times, times if split else (1.0,)))
    for P, M in itertools.product(range(1, 6), range(1, 13)):
        for v in ((1, 2, 3) if name in MULTI else (None,)):
            for tf, ti, tw in durs:
                applied += bool(_check(name, P, M, v, tf, ti + tw, tw))
    assert applied > 50, f"{name}: the closed form applied only {applied} times"


@settings(max_examples=150, deadline=None)
@given(name=st.sampled_from(CLOSED), P=st.integers(1, 7), M=st.integers(1, 30),
       v=st.integers(1, 3), tf=st.floats(0.1, 4), ti=st.floats(0.1, 4), tw=st.floats(0.0, 4),
       equal_fi=st.booleans())
def test_theory_matches_replay_random(name, P, M, v, tf, ti, tw, equal_fi):
    if equal_fi:  # zbv and dualpipev have closed forms only when T_F = T_I
        ti = tf
    _check(name, P, M, v if name in MULTI else None, tf, ti + tw, tw)


def test_fraction_and_ratio_are_different_numbers():
    th = theory("1f1b", 4, 8)
    assert th.bubble == pytest.approx(3 / 11) and th.formula == "(P-1)/(M+P-1)"
    assert th.ratio == pytest.approx(3 / 8) and th.ratio_formula == "(P-1)/M"
    assert th.peak_inflight == {0: 4, 1: 3, 2: 2, 3: 1}
    assert "uniform" in th.notes and "zero communication" in th.notes


def test_named_formulas():
    assert theory("naive", 4, 8).bubble == pytest.approx(3 / 4)
    assert theory("naive", 4, 8).formula == "(P-1)/P"
    assert theory("gpipe", 4, 8).peak_inflight == {s: 8 for s in range(4)}
    assert theory("eager-1f1b", 4, 8).peak_inflight == {0: 7, 1: 5, 2: 3, 3: 1}
    it = theory("interleaved-1f1b", 4, 8, 2)
    assert it.bubble == pytest.approx(3 / 19) and it.formula == "(P-1)/(vM+P-1)"
    bfs = theory("looped-bfs", 4, 8, 2)
    assert bfs.bubble == pytest.approx(3 / 19) and bfs.peak_inflight == {s: 8 for s in range(8)}
    # ZB-H1 with T_F = T_I = T_W = 1: bubble time (P-1)(1+1-1) = 3 over a 3M + 3 step
    h1 = theory("zb-h1", 4, 8, 1, t_f=1, t_b=2, t_w=1)
    assert h1.bubble_time == pytest.approx(3) and h1.bubble == pytest.approx(3 / 27)
    assert h1.peak_inflight == {0: 4, 1: 3, 2: 2, 3: 1}
    h2 = theory("zb-h2", 4, 8, 1, t_f=1, t_b=2, t_w=1)
    assert h2.bubble_time == pytest.approx(3) and h2.peak_inflight == {0: 7, 1: 5, 2: 3, 3: 1}
    # with a cheap W, H2 beats H1
    assert theory("zb-h2", 4, 8, t_f=1, t_b=1.5, t_w=0.5).bubble < theory("zb-h1", 4, 8, t_f=1, t_b=1.5, t_w=0.5).bubble
    zbv = theory("zbv", 4, 8, 2, t_f=1, t_b=2, t_w=1)
    assert zbv.bubble_time == pytest.approx(3) and zbv.peak_inflight == {s: min(8, 8 - s) for s in range(8)}
    # DualPipeV with each overlapped pair run as torch runs it: (P-1)max(T_F+2T_B-3T_W, 2T_F)
    assert theory("dualpipev", 4, 8, 2).bubble_time == pytest.approx(3 * (1 + 4 - 3))


def test_no_closed_form_outside_assumptions():
    th = theory("zbv", 4, 8, 2, t_f=1, t_b=3, t_w=1)  # T_I = 2 != T_F
    assert th.bubble is None and th.ratio is None and "no closed form" in th.notes
    assert theory("zb-h1", 4, 8, t_f=1, t_b=3, t_w=2).bubble is None  # T_W > T_F
    assert theory("zb-h2", 4, 4).bubble is None  # M < 2P
    assert theory("zbv", 4, 4).bubble is None  # M < 2P-1
    assert theory("zbv", 4, 4).peak_inflight == {s: min(4, 8 - s) for s in range(8)}


def test_measured_split_durations_via_t_i():
    a = theory("zb-h1", 4, 8, t_f=1.0, t_i=1.2, t_w=0.8)
    b = theory("zb-h1", 4, 8, t_f=1.0, t_b=2.0, t_w=0.8)
    assert a == b
    with pytest.raises(ScheduleError, match="t_i needs t_w"):
        theory("zb-h1", 4, 8, t_i=1.0)


def test_theory_checks_the_configuration():
    with pytest.raises(ScheduleError, match="M >= 2P"):
        theory("dualpipev", 4, 7)
    with pytest.raises(ScheduleError, match="unknown schedule"):
        theory("chimera", 4, 8)
    with pytest.raises(ScheduleError, match="t_w <= t_b"):
        theory("zb-h1", 4, 8, t_b=1, t_w=2)
