"""The framework's own per-step work: spans whose ops never belong to an action.

An action holds its input's delivery and its compute (docs/metrics.md, "What an action
holds"). The optimizer's annotated work (``Optimizer.step#…``, ``Optimizer.zero_grad#…``) and
FSDP2's hooks (``FSDP::pre_forward``, ``FSDP::post_backward_reduce``, ``FSDP::root_…``:
parameter all-gathers with their copy-in and copy-out, gradient reduce-scatters) run inside a
forward or backward call but are data-parallel or optimizer work, once per step or per module:
their ops are no action's compute, read with annotations or without.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from pipeaudit.timeline import intervals as iv

#: Names of the spans whose ops are not pipeline work.
FRAMEWORK_WORK_RE = r"^(Optimizer\.(step|zero_grad)#|FSDP::)"


def framework_spans(spans: pl.DataFrame, tid: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The framework-work spans (of thread ``tid``, or every thread), merged: sorted, disjoint
    (starts, ends)."""
    rows = spans.filter(pl.col("name").str.starts_with("Optimizer.")
                        | pl.col("name").str.starts_with("FSDP::"))  # cheap before the regex
    rows = rows.filter(pl.col("name").str.contains(FRAMEWORK_WORK_RE))
    if tid is not None:
        rows = rows.filter(pl.col("tid") == tid)
    return iv.merge(rows["start"].to_numpy(), rows["end"].to_numpy())


def inside(points: np.ndarray, spans: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Which points fall inside one of the (sorted, disjoint) spans."""
    lo, hi = spans
    if lo.size == 0:
        return np.zeros(points.size, dtype=bool)
    k = np.searchsorted(lo, points, side="right") - 1
    ok = k >= 0
    ok[ok] &= points[ok] < hi[k[ok]]
    return ok


def without_framework_work(units: pl.DataFrame, spans: pl.DataFrame) -> pl.DataFrame:
    """``units`` less those anchored inside a framework-work span of their own thread."""
    if units.height == 0:
        return units
    names = spans["name"]
    if not bool((names.str.starts_with("Optimizer.") | names.str.starts_with("FSDP::")).any()):
        return units
    drop = np.zeros(units.height, dtype=bool)
    anchored = units["anchor"].is_not_null()
    anchor = units["anchor"].fill_null(0).to_numpy()
    tids = units["tid"]
    for tid in tids.drop_nulls().unique().to_list():
        rows = np.flatnonzero(((tids == tid) & anchored).fill_null(False).to_numpy())
        ex = framework_spans(spans, tid)
        if ex[0].size and rows.size:
            drop[rows[inside(anchor[rows], ex)]] = True
    return units.filter(pl.Series(~drop))
