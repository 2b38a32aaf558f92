"""The measured configuration's split, improved by replays (advise.polished): an objective
built here whose best split lies beyond one-layer moves of the searched start must still be
found, exhaustively where the splits are few and by moves from several starts where not."""

from __future__ import annotations

import sys

from pipeaudit.advise.advise import Candidate, polished
from pipeaudit.advise.split_search import all_splits


def _cand(split, time, fits=None):
    return Candidate("1f1b", 1, 4, time, 0.0, None, fits, stage_layers=tuple(split))


def _replayer(times, over=()):
    calls = []

    def replay(split):
        calls.append(split)
        return _cand(split, times(split), False if split in over else None)
    return replay, calls


def valley(best, start=(2, 2, 2, 2)):
    """``best`` fastest; every other split slower the farther it is from ``start``, so that
    one-layer moves from ``start`` find nothing faster."""
    def times(split):
        return 100.0 if split == best else 150.0 + 10 * sum(
            abs(a - b) for a, b in zip(split, start))
    return times


def test_few_splits_are_replayed_every_one():
    times = valley((1, 2, 2, 3))
    replay, calls = _replayer(times)
    start = _cand((2, 2, 2, 2), times((2, 2, 2, 2)))
    out = polished([start], _cand((2, 2, 2, 2), 999.0), replay)
    assert out[0].stage_layers == (1, 2, 2, 3)
    assert len(set(calls)) == len(all_splits(8, 4)) - 1  # all but the start (and the base)
    # one-layer moves from the start alone would have stopped there: every neighbour is slower
    for b in range(3):
        for d in (1, -1):
            sp = [2, 2, 2, 2]
            sp[b] -= d
            sp[b + 1] += d
            assert times(tuple(sp)) > times((2, 2, 2, 2))


def test_a_split_over_the_cap_is_ranked_after_those_that_fit():
    times = valley((1, 2, 2, 3))
    replay, _ = _replayer(times, over={(1, 2, 2, 3)})
    out = polished([_cand((2, 2, 2, 2), times((2, 2, 2, 2)))], _cand((2, 2, 2, 2), 999.0), replay)
    assert out[0].stage_layers != (1, 2, 2, 3) and out[0].fits is not False
    assert out[-1].stage_layers == (1, 2, 2, 3)


def test_many_splits_climb_from_each_start(monkeypatch):
    """Past the exhaustive limit, moves run from every one of the best searched starts: the
    first is a local optimum, the second's valley holds the best split."""
    monkeypatch.setattr(sys.modules["pipeaudit.advise.advise"], "EXHAUSTIVE_SPLITS", 10)
    first, second, target = (6, 2, 2, 6), (3, 4, 5, 4), (3, 5, 4, 4)

    def times(split):
        d = sum(abs(a - b) for a, b in zip(split, target))
        return 101.0 if split == first else 100.0 + d if d <= 2 else 200.0
    replay, calls = _replayer(times)
    starts = [_cand(first, times(first)), _cand(second, times(second))]
    out = polished(starts, _cand((8, 4, 2, 2), 999.0), replay)
    assert out[0].stage_layers == target
    assert len(calls) < len(all_splits(16, 4)) / 4
