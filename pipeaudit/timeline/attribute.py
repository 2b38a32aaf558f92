"""Attribute compute units to action spans.

Units inside the framework's own per-step work (the optimizer's and FSDP's spans,
:mod:`pipeaudit.timeline.framework_work`) belong to no action. On CPU traces a unit
belongs to the span of the same thread that contains its start, and is clipped to the span: the time a span spends waiting for a recv
(no op running) is not compute. On GPU traces a kernel belongs to the span that
contains its launch, on any thread of the rank (the autograd engine launches
backward kernels from its own thread), and keeps its own GPU time; a kernel
whose launch is not in the trace belongs to the action whose GPU copy
(``gpu_user_annotation`` on the same device and stream) contains it.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from pipeaudit.timeline import intervals as iv
from pipeaudit.timeline.framework_work import without_framework_work
from pipeaudit.timeline.ops import RankOps

COMPUTE_SCHEMA = {"action": pl.Int64, "start": pl.Int64, "end": pl.Int64}
_PIECE_SCHEMA = {**COMPUTE_SCHEMA, "device": pl.Int64}
#: GPU copies of action spans: ``action`` (row in the spans table), device, stream, start, end.
COPY_SCHEMA = {"action": pl.Int64, "device": pl.Int64, "stream": pl.Int64, "start": pl.Int64,
               "end": pl.Int64}


def attribute(spans: pl.DataFrame, ops: RankOps, copies: pl.DataFrame | None = None,
              *, by_device: bool = False) -> pl.DataFrame:
    """Merged compute intervals of each span: columns ``action`` (row index in ``spans``), ``start``, ``end``.

    ``copies``: the spans' GPU copies (:func:`pair_gpu_copies`), for kernels without a launch.
    ``by_device``: merge per action and device instead (a ``device`` column is added: a
    single-process run's action may compute on several devices)."""
    empty = _PIECE_SCHEMA if by_device else COMPUTE_SCHEMA
    if spans.height == 0 or ops.units.height == 0:
        return pl.DataFrame(schema=empty)
    indexed = spans.with_row_index("action").with_columns(pl.col("action").cast(pl.Int64))
    units = without_framework_work(ops.units, ops.spans)  # optimizer, FSDP: no action's compute
    pieces = []
    if ops.on_gpu:
        launched = units.filter(pl.col("anchor").is_not_null())
        pieces.append(_by_anchor(indexed, launched, clip=False))
        if copies is not None and copies.height:
            pieces.append(_by_copy(copies, units.filter(pl.col("anchor").is_null())))
    else:
        for _, group in indexed.partition_by("tid", as_dict=True).items():
            mine = units.filter(pl.col("tid") == group["tid"][0])
            pieces.append(_by_anchor(group, mine, clip=True))
    pieces = [p for p in pieces if p.height]
    if not pieces:
        return pl.DataFrame(schema=empty)
    if by_device:
        return merge_per_action(pl.concat(pieces), keys=("action", "device"))
    return merge_per_action(pl.concat(pieces).drop("device"))


def _by_anchor(spans: pl.DataFrame, units: pl.DataFrame, *, clip: bool) -> pl.DataFrame:
    """Each unit to the span that contains its anchor (the latest span starting at or before it)."""
    if spans.height == 0 or units.height == 0:
        return pl.DataFrame(schema=_PIECE_SCHEMA)
    spans = spans.sort("start")
    s_start = spans["start"].to_numpy()
    s_end = spans["end"].to_numpy()
    s_idx = spans["action"].to_numpy()
    anchor = units["anchor"].to_numpy()
    k = np.searchsorted(s_start, anchor, side="right") - 1
    ok = k >= 0
    ok[ok] &= anchor[ok] < s_end[k[ok]]
    u_start = units["start"].to_numpy()[ok]
    u_end = units["end"].to_numpy()[ok]
    k = k[ok]
    if clip:
        u_end = np.minimum(u_end, s_end[k])
        u_start = np.maximum(u_start, s_start[k])
    device = (units["device"].filter(pl.Series(ok)) if "device" in units.columns
              else pl.Series([None] * len(k), dtype=pl.Int64))
    return pl.DataFrame({"action": s_idx[k], "start": u_start, "end": u_end, "device": device},
                        schema=_PIECE_SCHEMA)


def _by_copy(copies: pl.DataFrame, units: pl.DataFrame) -> pl.DataFrame:
    """Kernels without a launch event, to the action whose GPU copy on their stream holds them."""
    if units.height == 0:
        return pl.DataFrame(schema=_PIECE_SCHEMA)
    joined = units.select("start", "end", "device", "stream").join(
        copies.rename({"start": "c_start", "end": "c_end"}), on=["device", "stream"], how="inner",
        nulls_equal=True,
    ).filter((pl.col("c_start") <= pl.col("start")) & (pl.col("end") <= pl.col("c_end")))
    # a kernel inside nested copies belongs to the innermost (the latest to start)
    joined = joined.sort("c_start", descending=True).unique(["start", "end", "device", "stream"],
                                                          keep="first")
    return joined.select("action", "start", "end", "device").cast(_PIECE_SCHEMA)  # type: ignore[arg-type]


def pair_gpu_copies(spans: pl.DataFrame, gpu_spans: pl.DataFrame) -> pl.DataFrame:
    """The GPU copies of action ``spans`` (COPY_SCHEMA): by ``External id`` where both sides
    have one (Kineto gives the copy the CPU span's id), else by name and order of occurrence
    (the k-th span named N and, on each stream, the k-th copy named N)."""
    if spans.height == 0 or gpu_spans.height == 0:
        return pl.DataFrame(schema=COPY_SCHEMA)
    indexed = spans.with_row_index("action").with_columns(pl.col("action").cast(pl.Int64))
    copies = gpu_spans.filter(pl.col("name").is_in(indexed["name"].unique().implode()))
    by_id = copies.filter(pl.col("external_id").is_not_null()).join(
        indexed.filter(pl.col("external_id").is_not_null()).select("action", "external_id", "name"),
        on=["external_id", "name"], how="inner")
    rest = copies.filter(~pl.col("external_id").is_in(by_id["external_id"].implode())
                         | pl.col("external_id").is_null())
    rest = rest.sort("start").with_columns(
        k=pl.int_range(pl.len()).over(["name", "device", "stream"]))
    named = indexed.filter(~pl.col("action").is_in(by_id["action"].implode())).sort("start") \
        .with_columns(k=pl.int_range(pl.len()).over("name")).select("action", "name", "k")
    by_order = rest.join(named, on=["name", "k"], how="inner")
    cols = list(COPY_SCHEMA)
    return pl.concat([by_id.select(cols), by_order.select(cols)]).cast(COPY_SCHEMA)  # type: ignore[arg-type]


def merge_per_action(df: pl.DataFrame, keys: tuple[str, ...] = ("action",)) -> pl.DataFrame:
    """Merge overlapping intervals within each action (or each group of ``keys``): rows by
    key, then start; intervals that overlap or touch become one."""
    if keys == ("action",):
        return _merge_by_action(df)
    k = list(keys)
    df = df.filter(pl.col("end") > pl.col("start")).sort(k + ["start"])
    prev_end = pl.col("end").cum_max().shift(1).over(k)
    df = df.with_columns(new=(prev_end.is_null() | (pl.col("start") > prev_end)))
    df = df.with_columns(group=pl.col("new").cum_sum())
    return (
        df.group_by("group", maintain_order=True)
        .agg(*(pl.col(c).first() for c in k), pl.col("start").min(), pl.col("end").max())
        .select(*k, "start", "end")
    )


def _merge_by_action(df: pl.DataFrame) -> pl.DataFrame:
    """:func:`merge_per_action` by ``action`` alone: :func:`intervals.merge_grouped` (numpy, a
    few ms for 10^5 units where polars' window takes about 15)."""
    action, start, end = iv.merge_grouped(df["action"].to_numpy(), df["start"].to_numpy(),
                                          df["end"].to_numpy())
    return pl.DataFrame({"action": action, "start": start, "end": end},
                        schema={c: df.schema[c] for c in ("action", "start", "end")})
