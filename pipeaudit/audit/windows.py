"""Step windows, compute sets and the measured bubble (DESIGN.md definitions).

- Step window W_k: earliest compute start to latest compute end over all ranks in step k.
- Bubble of a rank in step k: 1 - |C(rank, k) ∩ W_k| / |W_k|, where C is the union
  of the compute intervals of the rank's actions in step k.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from pipeaudit.timeline import intervals as iv
from pipeaudit.timeline.rank import RankTimeline


def rank_step_compute(rt: RankTimeline, step: int) -> iv.Intervals:
    """Union of the compute intervals of a rank's actions in one step."""
    ids = rt.actions.with_row_index("_i").filter(pl.col("step") == step)["_i"]
    c = rt.compute.filter(pl.col("action").is_in(ids.cast(pl.Int64).implode()))
    return iv.merge(c["start"].to_numpy(), c["end"].to_numpy())


def compute_by_step(rt: RankTimeline, steps: list[int]) -> dict[int, iv.Intervals]:
    """``rank_step_compute(rt, k)`` for every k in ``steps`` in one pass over the rank."""
    out = {k: iv.empty() for k in steps}
    if rt.compute.height == 0 or rt.actions.height == 0:
        return out
    action_step = rt.actions["step"].to_numpy()
    act = rt.compute["action"].to_numpy()
    starts = rt.compute["start"].to_numpy()
    ends = rt.compute["end"].to_numpy()
    step_of = action_step[act]
    for k in steps:
        sel = step_of == k
        if sel.any():
            out[k] = iv.merge(starts[sel], ends[sel])
    return out


def step_window(computes: list[iv.Intervals]) -> tuple[int, int] | None:
    """W_k from the compute sets of every rank in step k (None if nothing computed)."""
    starts = [c[0][0] for c in computes if c[0].size]
    ends = [c[1][-1] for c in computes if c[1].size]
    if not starts:
        return None
    return int(min(starts)), int(max(ends))


def bubble(compute: iv.Intervals, window: tuple[int, int]) -> float:
    """1 - |C ∩ W| / |W|."""
    lo, hi = window
    if hi <= lo:
        return 0.0
    return 1.0 - iv.total(iv.clip(compute, lo, hi)) / (hi - lo)


def windows_and_bubbles(ranks: list[RankTimeline], steps: list[int]):
    """Per step: (window, {rank: bubble}, {rank: compute set})."""
    out = {}
    by_rank = {rt.rank: compute_by_step(rt, steps) for rt in ranks}
    for k in steps:
        comp = {rt.rank: by_rank[rt.rank][k] for rt in ranks}
        w = step_window(list(comp.values()))
        if w is None:
            continue
        out[k] = (w, {r: bubble(c, w) for r, c in comp.items()}, comp)
    return out


def mean(values) -> float | None:
    vals = [v for v in values if v is not None]
    return float(np.mean(vals)) if vals else None
