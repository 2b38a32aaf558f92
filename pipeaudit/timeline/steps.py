"""Assign actions to training steps, on one rank.

A rank's step windows come, in order of trust, from its ``ProfilerStep#N`` spans, else from
its optimizer's own annotations (each ``Optimizer.step#…`` ends a step). An action belongs
to the window that holds the start of its host span; steps are then numbered 0, 1, … in
order among the windows that hold pipeline actions, so ranks agree even if their profiler
step numbers are offset. Without windows, a rank's k-th occurrence of an action (stage,
kind, microbatch) belongs to step k: the schedule repeats once per step (inferred actions,
numbered by execution order, are settled across ranks later:
:mod:`pipeaudit.timeline.stepping`).
"""

from __future__ import annotations

import numpy as np
import polars as pl

PROFILER_STEP_RE = r"^ProfilerStep#(\d+)$"
#: The optimizer step spans torch writes (``Optimizer.step#<class>.step``) start with this.
OPTIMIZER_STEP_PREFIX = "Optimizer.step#"
#: Evidence names, as reports give them.
PROFILER_EVIDENCE = "ProfilerStep spans"
OPTIMIZER_EVIDENCE = "optimizer annotations (Optimizer.step#...)"

WINDOW_SCHEMA = {"profiler_step": pl.Int64, "start": pl.Int64, "end": pl.Int64}
_MIN, _MAX = -(2**62), 2**62


def profiler_steps(spans: pl.DataFrame) -> pl.DataFrame:
    """``ProfilerStep#N`` spans of a rank: columns ``profiler_step``, ``start``, ``end``."""
    named = spans.filter(pl.col("name").str.starts_with("ProfilerStep#"))  # before the regex
    steps = named.filter(pl.col("name").str.contains(PROFILER_STEP_RE)).select(
        profiler_step=pl.col("name").str.extract(PROFILER_STEP_RE, 1).cast(pl.Int64, strict=False),
        start="start",
        end="end",
    ).drop_nulls("profiler_step")  # ProfilerStep#<too many digits> is not a step
    return steps.sort("start").unique("profiler_step", keep="first", maintain_order=True)


def optimizer_steps(spans: pl.DataFrame) -> pl.DataFrame:
    """Step windows cut at the end of each ``Optimizer.step#…`` span (``profiler_step`` null):
    before the first, between consecutive ones, and after the last."""
    ends = np.unique(spans.filter(pl.col("name").str.starts_with(OPTIMIZER_STEP_PREFIX))["end"].to_numpy())
    if ends.size == 0:
        return pl.DataFrame(schema=WINDOW_SCHEMA)
    bounds = np.concatenate([[_MIN], ends, [_MAX]]).astype(np.int64)
    return pl.DataFrame({"profiler_step": pl.Series([None] * (bounds.size - 1), dtype=pl.Int64),
                         "start": bounds[:-1], "end": bounds[1:]}, schema=WINDOW_SCHEMA)


def step_windows(spans: pl.DataFrame) -> tuple[pl.DataFrame, str | None]:
    """(windows, evidence) of a rank: ProfilerStep spans, else optimizer steps, else none."""
    prof = profiler_steps(spans)
    if prof.height:
        return prof, PROFILER_EVIDENCE
    opt = optimizer_steps(spans)
    if opt.height:
        return opt, OPTIMIZER_EVIDENCE
    return pl.DataFrame(schema=WINDOW_SCHEMA), None


def assign_steps(actions: pl.DataFrame, steps: pl.DataFrame,
                 at: str = "start") -> tuple[pl.DataFrame, int]:
    """Add ``step`` and ``profiler_step`` columns; return the table and how many actions fell
    outside every step. ``at``: the column of the action's time that a step window must hold
    (the host span's start: ProfilerStep spans are host spans)."""
    if steps.height == 0:
        out = actions.with_columns(
            step=pl.int_range(pl.len()).over(["stage", "kind", "microbatch"]).cast(pl.Int64),
            profiler_step=pl.lit(None, dtype=pl.Int64),
        )
        return out, 0
    steps = steps.sort("start")
    st = steps["start"].to_numpy()
    en = steps["end"].to_numpy()
    a = actions[at].to_numpy()
    k = np.searchsorted(st, a, side="right") - 1
    inside = (k >= 0) & (a < en[np.maximum(k, 0)])
    window = np.where(inside, k, -1)
    prof = steps["profiler_step"].gather(np.maximum(k, 0))
    if not inside.all():
        prof = prof.scatter(np.flatnonzero(~inside), None)
    out = actions.with_columns(_window=pl.Series(window, dtype=pl.Int64),
                               profiler_step=prof.alias("profiler_step"))
    outside = int((~inside).sum())
    out = out.filter(pl.col("_window") >= 0)
    used = np.unique(out["_window"].to_numpy())
    mapping = {int(w): i for i, w in enumerate(sorted(used))}
    out = out.with_columns(
        step=pl.col("_window").replace_strict(mapping, return_dtype=pl.Int64)
        if mapping else pl.lit(None, dtype=pl.Int64)
    ).drop("_window")
    return out, outside


def number_by_order(actions: pl.DataFrame, at: str = "host_start") -> pl.DataFrame:
    """Microbatches of inferred actions: execution order (by ``at``) of each kind within its
    step. The rows keep their order."""
    return actions.with_columns(
        microbatch=(pl.col(at).rank("ordinal").over(["step", "stage", "kind"]) - 1).cast(pl.Int64))
