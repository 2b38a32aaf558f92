"""Known answers for :func:`pipeaudit.timeline.attribute.merge_per_action`: each action's
compute intervals merged, the same from the numpy pass (by action) as from polars' window
(by any keys)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from pipeaudit.timeline.attribute import merge_per_action


def _units(rows: list[tuple[int, int, int]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema={"action": pl.Int64, "start": pl.Int64, "end": pl.Int64},
                        orient="row")


def _by_window(df: pl.DataFrame) -> pl.DataFrame:
    """The same merge through the general path (a constant second key)."""
    return merge_per_action(df.with_columns(one=pl.lit(1)), keys=("action", "one")).drop("one")


def test_overlapping_and_touching_merge_gaps_do_not():
    df = _units([(1, 0, 10), (0, 5, 8), (1, 5, 12), (1, 12, 15), (1, 20, 30), (0, 0, 5),
                 (0, 9, 9)])
    assert merge_per_action(df).rows() == [(0, 0, 8), (1, 0, 15), (1, 20, 30)]


@pytest.mark.parametrize("seed", range(8))
def test_random_units_match_the_window(seed: int):
    rng = np.random.default_rng(seed)
    n = 3000
    start = 4_847_434_956_615_191 + rng.integers(0, 10**9, size=n)
    df = _units(list(zip(rng.integers(0, 40, size=n).tolist(), start.tolist(),
                         (start + rng.choice([0, 1, 50, 10**5, 10**7], size=n)).tolist())))
    assert merge_per_action(df).equals(_by_window(df))


def test_no_lasting_unit_gives_an_empty_table():
    assert merge_per_action(_units([(0, 5, 5)])).height == 0
