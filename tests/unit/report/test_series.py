"""What the pictures draw, on built traces whose answer is known (tests/support/builders.py)."""

from __future__ import annotations

import numpy as np
import pytest

import pipeaudit
from tests.support.builders import build_run, gpipe_orders, one_f_one_b_orders
from pipeaudit.report import series


@pytest.fixture(scope="module")
def built_1f1b(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("series")
    built = build_run(tmp, one_f_one_b_orders(4, 8), steps=2, latency=200)
    return built, pipeaudit.load(built.directory)


def test_bubble_intervals_are_the_true_bubble(built_1f1b):
    built, run = built_1f1b
    windows = series.step_windows(run.timeline)
    gaps = series.bubble_intervals(run.timeline, windows)
    truth = built.true_bubble()
    for rank, rows in gaps.items():
        per_step = [sum(e - s for k2, s, e in rows if k2 == k) / (windows[k][1] - windows[k][0])
                    for k in sorted(windows)]
        assert np.mean(per_step) == pytest.approx(truth[rank], abs=1e-9)
        for k, s, e in rows:  # inside the window, never on compute
            assert windows[k][0] <= s < e <= windows[k][1]


def test_windows_match_the_audit(built_1f1b):
    _, run = built_1f1b
    windows = series.step_windows(run.timeline)
    origin = series.run_origin(run.timeline)
    for st in run.audit().steps:
        lo, hi = windows[st.step]
        assert (hi - lo) / 1000 == pytest.approx(st.step_time_us)
        assert lo / 1000 == pytest.approx(st.start_us)
        assert origin <= lo


def test_inflight_peaks_follow_1f1b(built_1f1b):
    _, run = built_1f1b
    s = series.inflight_series(run.timeline)
    assert {st: max(v for _, v in rows) for st, rows in s.items()} == {0: 4, 1: 3, 2: 2, 3: 1}
    for rows in s.values():
        assert rows[-1][1] == 0  # every microbatch's backward ran
        assert [t for t, _ in rows] == sorted(t for t, _ in rows)


def test_ideal_is_the_replay_without_latency(built_1f1b):
    _, run = built_1f1b
    result = run.audit()
    windows = series.step_windows(run.timeline)
    for st in result.steps:
        lo, _ = windows[st.step]
        ideal = series.ideal_actions(run.timeline, st.step, lo)
        assert len(ideal) == 4 * 16
        assert min(a.start for a in ideal) == lo
        assert (max(a.end for a in ideal) - lo) / 1000 == pytest.approx(st.replay_step_time_us)
        # with 200 µs latency per hop the measured step is longer than its ideal
        assert st.replay_step_time_us < st.step_time_us


def test_ideal_equals_measured_when_communication_is_free(tmp_path):
    built = build_run(tmp_path, gpipe_orders(3, 4))
    run = pipeaudit.load(built.directory)
    lo, _ = series.step_windows(run.timeline)[0]
    measured = {(a.stage, a.kind, a.microbatch): (a.start, a.end) for a in series.step_actions(run.timeline, 0)}
    for a in series.ideal_actions(run.timeline, 0, lo):
        s, e = measured[(a.stage, a.kind, a.microbatch)]
        # the replay is the earliest each action could start in its order: never later than
        # measured, and here only the builder's 1 µs send ops earlier
        assert a.start <= s and s - a.start <= 20_000
        assert a.end - a.start == pytest.approx(e - s, abs=1000)


def test_downsample_keeps_extremes():
    ts = np.arange(100_000, dtype=np.int64)
    vals = np.sin(ts / 500.0) * 1000 + (ts == 77_777) * 5000
    t2, v2 = series.downsample(ts, vals, 1000)
    assert len(t2) <= 1002
    assert v2.max() == vals.max() and v2.min() == vals.min()
    assert t2[0] == 0 and t2[-1] == ts[-1] and np.all(np.diff(t2) > 0)
    same = series.downsample(ts[:10], vals[:10], 1000)
    assert len(same[0]) == 10
