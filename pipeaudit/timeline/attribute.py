"""Attribute compute units to action spans.

On CPU traces a unit belongs to the span of the same thread that contains its
start, and is clipped to the span: the time a span spends waiting for a recv
(no op running) is not compute. On GPU traces a kernel belongs to the span that
contains its launch, on any thread of the rank (the autograd engine launches
backward kernels from its own thread), and keeps its own GPU time.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from pipeaudit.timeline.ops import RankOps

COMPUTE_SCHEMA = {"action": pl.Int64, "start": pl.Int64, "end": pl.Int64}


def attribute(spans: pl.DataFrame, ops: RankOps) -> pl.DataFrame:
    """Merged compute intervals of each span: columns ``action`` (row index in ``spans``), ``start``, ``end``."""
    if spans.height == 0 or ops.units.height == 0:
        return pl.DataFrame(schema=COMPUTE_SCHEMA)
    indexed = spans.with_row_index("action").with_columns(pl.col("action").cast(pl.Int64))
    groups = [(None, indexed)] if ops.on_gpu else list(indexed.partition_by("tid", as_dict=True).items())
    pieces = []
    for key, group in groups:
        group = group.sort("start")
        units = ops.units if key is None else ops.units.filter(pl.col("tid") == group["tid"][0])
        if units.height == 0:
            continue
        s_start = group["start"].to_numpy()
        s_end = group["end"].to_numpy()
        s_idx = group["action"].to_numpy()
        anchor = units["anchor"].to_numpy()
        k = np.searchsorted(s_start, anchor, side="right") - 1
        ok = k >= 0
        ok[ok] &= anchor[ok] < s_end[k[ok]]
        u_start = units["start"].to_numpy()[ok]
        u_end = units["end"].to_numpy()[ok]
        k = k[ok]
        if not ops.on_gpu:
            u_end = np.minimum(u_end, s_end[k])
            u_start = np.maximum(u_start, s_start[k])
        pieces.append(pl.DataFrame({"action": s_idx[k], "start": u_start, "end": u_end},
                                   schema=COMPUTE_SCHEMA))
    if not pieces:
        return pl.DataFrame(schema=COMPUTE_SCHEMA)
    return merge_per_action(pl.concat(pieces))


def merge_per_action(df: pl.DataFrame) -> pl.DataFrame:
    """Merge overlapping intervals within each action."""
    df = df.filter(pl.col("end") > pl.col("start")).sort(["action", "start"])
    prev_end = pl.col("end").cum_max().shift(1).over("action")
    df = df.with_columns(new=(prev_end.is_null() | (pl.col("start") > prev_end)))
    df = df.with_columns(group=pl.col("new").cum_sum())
    return (
        df.group_by("group", maintain_order=True)
        .agg(pl.col("action").first(), pl.col("start").min(), pl.col("end").max())
        .select("action", "start", "end")
    )
