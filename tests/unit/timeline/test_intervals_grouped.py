"""``intervals.merge_grouped``: every group's union, as ``merge`` gives it, whether the
intervals come sorted by group then start (its path without a sort) or not."""

from __future__ import annotations

import numpy as np
import pytest

from pipeaudit.timeline import intervals as iv


def _by_merge(g: np.ndarray, s: np.ndarray, e: np.ndarray):
    out_g, out_s, out_e = [], [], []
    for k in np.unique(g):
        ms, me = iv.merge(s[g == k], e[g == k])
        out_g += [k] * ms.size
        out_s += ms.tolist()
        out_e += me.tolist()
    return (np.asarray(out_g, dtype=np.int64), np.asarray(out_s, dtype=np.int64),
            np.asarray(out_e, dtype=np.int64))


@pytest.mark.parametrize("ordered", [True, False])
def test_merge_grouped_is_each_groups_merge(ordered):
    rng = np.random.default_rng(7)
    for _ in range(500):
        n = int(rng.integers(0, 50))
        g = rng.integers(-2, 5, n)
        s = rng.integers(0, 200, n) * 10 ** int(rng.integers(0, 15))
        e = s + rng.integers(-5, 40, n) * 10 ** int(rng.integers(0, 3))  # empty ones too
        if ordered:
            o = np.lexsort((s, g))
            g, s, e = g[o], s[o], e[o]
        got, want = iv.merge_grouped(g, s, e), _by_merge(g, s, e)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)
            assert a.dtype == np.int64


def test_merge_grouped_touching_and_far_apart():
    # touching intervals merge; times too far apart for the path without a sort still merge
    g = np.array([0, 0, 1, 1, 2, 2, 2])
    s = np.array([0, 5, 0, 3, 1, 10, 2**62])
    e = np.array([5, 9, 2, 4, 2**61, 2**62, 2**62 + 5])
    got, want = iv.merge_grouped(g, s, e), _by_merge(g, s, e)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    assert got[1].tolist() == [0, 0, 3, 1]
    assert got[2].tolist() == [9, 2, 4, 2**62 + 5]
