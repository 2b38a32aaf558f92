"""Assign actions to training steps.

With ``ProfilerStep#N`` spans, an action belongs to the span that contains its
start; steps are then numbered 0, 1, … in order among the spans that hold
pipeline actions, so ranks agree even if their profiler step numbers are
offset. Without them, a rank's k-th occurrence of an action (stage, kind,
microbatch) belongs to step k: the schedule repeats once per step.
"""

from __future__ import annotations

import numpy as np
import polars as pl

PROFILER_STEP_RE = r"^ProfilerStep#(\d+)$"


def profiler_steps(spans: pl.DataFrame) -> pl.DataFrame:
    """``ProfilerStep#N`` spans of a rank: columns ``profiler_step``, ``start``, ``end``."""
    steps = spans.filter(pl.col("name").str.contains(PROFILER_STEP_RE)).select(
        profiler_step=pl.col("name").str.extract(PROFILER_STEP_RE, 1).cast(pl.Int64, strict=False),
        start="start",
        end="end",
    ).drop_nulls("profiler_step")  # ProfilerStep#<too many digits> is not a step
    return steps.sort("start").unique("profiler_step", keep="first", maintain_order=True)


def assign_steps(actions: pl.DataFrame, steps: pl.DataFrame,
                 at: str = "start") -> tuple[pl.DataFrame, int]:
    """Add ``step`` and ``profiler_step`` columns; return the table and how many actions fell
    outside every step. ``at``: the column of the action's time that a step span must hold
    (the host span's start: ProfilerStep spans are host spans)."""
    if steps.height == 0:
        out = actions.with_columns(
            step=pl.int_range(pl.len()).over(["stage", "kind", "microbatch"]).cast(pl.Int64),
            profiler_step=pl.lit(None, dtype=pl.Int64),
        )
        return out, 0
    st = steps["start"].to_numpy()
    en = steps["end"].to_numpy()
    a = actions[at].to_numpy()
    k = np.searchsorted(st, a, side="right") - 1
    inside = (k >= 0) & (a < en[np.maximum(k, 0)])
    prof = np.where(inside, steps["profiler_step"].to_numpy()[np.maximum(k, 0)], -1)
    out = actions.with_columns(profiler_step=pl.Series(prof, dtype=pl.Int64))
    outside = int((~inside).sum())
    out = out.filter(pl.col("profiler_step") >= 0)
    used = np.unique(out["profiler_step"].to_numpy())
    mapping = {int(p): i for i, p in enumerate(sorted(used))}
    out = out.with_columns(
        step=pl.col("profiler_step").replace_strict(mapping, return_dtype=pl.Int64)
        if mapping else pl.lit(None, dtype=pl.Int64)
    )
    return out, outside
