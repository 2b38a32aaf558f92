"""Known answers for :func:`pipeaudit.trace.columns.in_time_order`: the events table in the
order of polars' stable sort on (ts, dur descending), however the rows arrive."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from pipeaudit.trace.columns import MAX_RUNS, in_time_order


def _table(ts: list[int], dur: list[int]) -> pl.DataFrame:
    return pl.DataFrame({"name": [f"e{i}" for i in range(len(ts))], "ts": ts, "dur": dur},
                        schema={"name": pl.Utf8, "ts": pl.Int64, "dur": pl.Int64})


def _sorted(df: pl.DataFrame) -> pl.DataFrame:
    return df.sort(["ts", "dur"], descending=[False, True], maintain_order=True)


def test_the_profilers_span_written_last_goes_first():
    df = _table([10, 20, 30, 40, 5], [1, 1, 1, 1, 100])
    out = in_time_order(df)
    assert out["name"].to_list() == ["e4", "e0", "e1", "e2", "e3"]
    assert out["ts"].flags["SORTED_ASC"]


def test_in_order_already_is_the_same_table():
    df = _table([1, 2, 3], [5, 5, 5])
    assert in_time_order(df).equals(df)


def test_ties_longest_first_then_the_files_order():
    df = _table([10, 10, 10, 5, 10], [1, 3, 3, 2, 0])
    assert in_time_order(df)["name"].to_list() == ["e3", "e1", "e2", "e0", "e4"]


@pytest.mark.parametrize("runs", [1, 2, 3, MAX_RUNS - 1, MAX_RUNS, 500])
@pytest.mark.parametrize("ties", [False, True])
def test_random_runs_match_the_stable_sort(runs: int, ties: bool):
    rng = np.random.default_rng(runs * 2 + ties)
    n = 2000
    ts = rng.choice(10 * n, size=n, replace=ties)
    if not ties:
        ts = rng.permutation(10 * n)[:n]
    cuts = np.sort(rng.choice(np.arange(1, n), size=runs - 1, replace=False))
    pieces = [np.sort(p) for p in np.split(ts, cuts)]  # `runs` sorted runs, in a random order
    rng.shuffle(pieces)
    ts = np.concatenate(pieces)
    dur = rng.integers(0, 5, size=n)
    df = _table(ts.tolist(), dur.tolist())
    out = in_time_order(df)
    assert out.equals(_sorted(df))
    assert out["ts"].flags["SORTED_ASC"]


def test_one_row_and_empty():
    assert in_time_order(_table([3], [1])).height == 1
    assert in_time_order(_table([], [])).height == 0
