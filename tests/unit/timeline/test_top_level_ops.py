"""Known answers for which host ops are top-level (:func:`pipeaudit.timeline.ops._top_level`):
the pass over rows in the decoded order (by start, the longest first) gives what the sort by
thread gives, for every thread count, nesting depth and op of no duration."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from pipeaudit.timeline.ops import _top_level, _top_level_sorted
from pipeaudit.trace.columns import in_time_order


def _ops(rows: list[tuple[str, int, int, str]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema={"tid": pl.Utf8, "start": pl.Int64, "end": pl.Int64,
                                      "name": pl.Utf8}, orient="row")


def _decoded(df: pl.DataFrame) -> pl.DataFrame:
    """The rows as the decoder hands them over: by start, the longest first."""
    return in_time_order(df.with_columns(ts=pl.col("start"), dur=pl.col("end") - pl.col("start"))
                         ).drop("ts", "dur")


def test_nested_ops_are_dropped_per_thread():
    ops = _ops([("1", 0, 100, "forward"), ("1", 10, 20, "aten::mm"), ("2", 15, 30, "recv"),
                ("1", 100, 150, "backward"), ("1", 120, 130, "aten::mm"), ("2", 20, 25, "inner")])
    top = _top_level(_decoded(ops))
    assert top.select("tid", "name").rows() == [("1", "forward"), ("1", "backward"), ("2", "recv")]


def test_an_op_of_no_duration_that_starts_with_another_is_not_inside_it():
    ops = _ops([("1", 50, 90, "forward"), ("1", 50, 50, "recv"), ("1", 60, 60, "inside"),
                ("1", 0, 50, "earlier")])
    top = _top_level(_decoded(ops))
    assert top["name"].to_list() == ["earlier", "recv", "forward"]


def test_of_two_identical_ops_the_first_in_the_file_is_kept():
    ops = _ops([("1", 0, 10, "a"), ("1", 0, 10, "b")])
    assert _top_level(_decoded(ops))["name"].to_list() == ["a"]


def test_ops_without_a_thread_are_a_thread_of_their_own():
    ops = _ops([(None, 0, 100, "outer"), ("1", 10, 20, "other thread"), (None, 10, 20, "inner")])
    assert _top_level(_decoded(ops))["name"].to_list() == ["outer", "other thread"]


def test_rows_in_any_other_order_take_the_sort():
    ops = _ops([("1", 10, 20, "inner"), ("1", 0, 100, "outer")])
    assert _top_level(ops)["name"].to_list() == ["outer"]


@pytest.mark.parametrize("seed", range(12))
def test_random_nesting_matches_the_sort_by_thread(seed: int):
    rng = np.random.default_rng(seed)
    rows = []
    for tid in [str(t) for t in range(1 + seed % 4)]:
        t = 0
        for _ in range(300):
            t += int(rng.integers(0, 4))
            dur = int(rng.choice([0, 0, 1, 2, 5, 30]))
            rows.append((tid, t, t + dur, f"op{len(rows)}"))
    order = rng.permutation(len(rows))
    ops = _decoded(_ops([rows[i] for i in order]))
    fast, sorted_ = _top_level(ops), _top_level_sorted(ops)
    assert fast.equals(sorted_)
    assert 0 < fast.height < ops.height


def test_a_transfers_preparation_is_the_run_of_detaches_and_allocations_right_before_it():
    """:func:`_p2p_preparation`: only a run of ``P2P_PREP_OPS`` that a point-to-point op of
    the same thread follows; one that compute or another thread's transfer follows is compute."""
    from pipeaudit.timeline.ops import P2P_OP_RE, _p2p_preparation

    rows = [("1", 0, 10, "aten::addmm"), ("1", 10, 12, "aten::empty"), ("1", 12, 14, "aten::detach"),
            ("1", 14, 20, "c10d::send"), ("1", 20, 22, "aten::detach"), ("1", 22, 30, "aten::add_"),
            ("1", 30, 32, "aten::detach_"), ("2", 0, 5, "c10d::recv_"),
            ("2", 5, 7, "aten::empty"), ("2", 7, 9, "aten::detach"), ("2", 9, 12, "c10d::recv_")]
    top = _top_level(_decoded(_ops(rows))).with_columns(p2p=pl.col("name").str.contains(P2P_OP_RE))
    prep = top.with_columns(_p2p_preparation(top)).filter(pl.col("p2p_prep"))
    assert prep.select("tid", "start").rows() == [("1", 10), ("1", 12), ("2", 5), ("2", 7)]
