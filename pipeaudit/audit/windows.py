"""Step windows, compute sets and the measured bubble (docs/metrics.md definitions).

- Step window W_k: earliest compute start to latest compute end over all ranks in step k.
- Bubble of a rank in step k: 1 - |C(rank, k) ∩ W_k| / |W_k|, where C is the union
  of the compute intervals of the rank's actions in step k.

The compute sets of every rank and step are merged a batch of ranks at a time, each batch in
one pass over its compute intervals (:func:`pipeaudit.timeline.intervals.merge_grouped`), not
rank by rank and step by step.
"""

from __future__ import annotations

import numpy as np

from pipeaudit.timeline import intervals as iv
from pipeaudit.timeline.rank import RankTimeline


#: Compute intervals merged in one pass (:func:`computes_by_rank`): a pass's temporaries are
#: about ten times its intervals' 24 bytes, so a replica of 64 ranks at once (200,000
#: intervals) held 30 MB more at its peak; ranks are taken in batches of about this many.
MERGE_BATCH_ROWS = 32768


def computes_by_rank(ranks: list[RankTimeline], steps: list[int]) -> dict[int, dict[int, iv.Intervals]]:
    """Rank -> step -> the rank's compute set in that step (empty where it computed nothing),
    for every step in ``steps``: ranks merged a batch at a time (:data:`MERGE_BATCH_ROWS`),
    every step of a batch's ranks at once."""
    out: dict[int, dict[int, iv.Intervals]] = {rt.rank: {k: iv.empty() for k in steps}
                                               for rt in ranks}
    if not steps:
        return out
    step_list = np.asarray(sorted(set(steps)), dtype=np.int64)
    groups: list[np.ndarray] = []
    starts: list[np.ndarray] = []
    ends: list[np.ndarray] = []
    rows = 0
    for i, rt in enumerate(ranks):
        compute = rt.compute  # unpacked: read once
        if compute.height == 0 or rt.actions.height == 0:
            continue
        step_of = rt.actions["step"].to_numpy()[compute["action"].to_numpy()]
        pos = np.searchsorted(step_list, step_of)
        pos_c = np.minimum(pos, step_list.size - 1)
        known = step_list[pos_c] == step_of
        groups.append(i * step_list.size + pos_c[known])
        starts.append(compute["start"].to_numpy()[known])
        ends.append(compute["end"].to_numpy()[known])
        rows += int(known.sum())
        if rows >= MERGE_BATCH_ROWS:
            _merge_into(out, ranks, step_list, groups, starts, ends)
            groups, starts, ends, rows = [], [], [], 0
    if groups:
        _merge_into(out, ranks, step_list, groups, starts, ends)
    return out


def _merge_into(out: dict[int, dict[int, iv.Intervals]], ranks: list[RankTimeline],
                step_list: np.ndarray, groups: list[np.ndarray], starts: list[np.ndarray],
                ends: list[np.ndarray]) -> None:
    """Merge one batch's intervals per (rank, step) group and put each group's set in ``out``."""
    g, s, e = iv.merge_grouped(np.concatenate(groups), np.concatenate(starts), np.concatenate(ends))
    if g.size == 0:
        return
    cut = np.flatnonzero(np.diff(g)) + 1
    lo = np.concatenate([[0], cut])
    hi = np.concatenate([cut, [g.size]])
    for key, a, b in zip(g[lo].tolist(), lo.tolist(), hi.tolist()):
        rank_i, step_i = divmod(key, step_list.size)
        out[ranks[rank_i].rank][int(step_list[step_i])] = (s[a:b], e[a:b])


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
    by_rank = computes_by_rank(ranks, steps)
    for k in steps:
        comp = {rt.rank: by_rank[rt.rank][k] for rt in ranks}
        w = step_window(list(comp.values()))
        if w is None:
            continue
        span = w[1] - w[0]
        # C(rank, k) lies inside W_k by construction: |C ∩ W| = |C|
        out[k] = (w, {r: (1.0 - iv.total(c) / span if span > 0 else 0.0) for r, c in comp.items()},
                  comp)
    return out


def mean(values) -> float | None:
    vals = [v for v in values if v is not None]
    return float(np.mean(vals)) if vals else None
