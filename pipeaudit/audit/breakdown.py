"""Where each rank's step goes: compute, pipeline bubble, exposed point-to-point transfer,
exposed data-parallel communication.

For rank r in step k the span is E_k = [W_k start, max(W_k end, end of r's collectives of the
step)]: the step window, stretched by the gradient sync that follows the last backward
(DESIGN.md's step time stays |W_k|). Over E_k:

- compute: the rank's compute in its actions of step k (C(r, k) of the bubble);
- exposed data-parallel communication: the step's collectives not overlapped by that compute;
- exposed point-to-point transfer: send/recv time not overlapped by either, less the part of
  each recv spent waiting for its peer to send (waiting is bubble made visible; see
  :mod:`pipeaudit.timeline.p2p`);
- pipeline bubble: the rest.

The four add up to |E_k|. A step's collectives are those that start between its window's
start and the next step's. With tensor parallelism, collectives inside an action belong to
the action (tensor-parallel all-reduces), not to the data-parallel sync.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from pipeaudit.timeline import intervals as iv
from pipeaudit.timeline.rank import RankTimeline

US = 1000.0


@dataclass
class StepShare:
    """One rank's step, split (µs, summed over the audited steps)."""

    span_us: float = 0.0
    compute_us: float = 0.0
    bubble_us: float = 0.0
    exposed_p2p_us: float = 0.0
    exposed_dp_us: float = 0.0
    dp_comm_us: float = 0.0

    def add(self, other: "StepShare") -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def per_step(self, n: int) -> dict[str, float]:
        """Mean per step, µs."""
        return {name: getattr(self, name) / max(n, 1) for name in self.__dataclass_fields__}


def dp_instances(rt: RankTimeline, lo: int, hi: int | None, *, tp: bool) -> pl.DataFrame:
    """The rank's collectives that start in [lo, hi) (hi None: no end), without the ones
    inside an action when the job is tensor parallel."""
    c = rt.collectives.filter(pl.col("start") >= lo)
    if hi is not None:
        c = c.filter(pl.col("start") < hi)
    if tp and c.height and rt.actions.height:
        a = rt.actions.sort("host_start")
        s, e = a["host_start"].to_numpy(), a["host_end"].to_numpy()
        st = c["start"].to_numpy()
        k = np.searchsorted(s, st, side="right") - 1
        inside = (k >= 0) & (st < e[np.maximum(k, 0)])
        c = c.filter(pl.Series(~inside))
    return c


def step_share(rt: RankTimeline, compute: iv.Intervals, window: tuple[int, int],
               next_start: int | None, *, tp: bool, p2p_waiting: iv.Intervals | None = None) -> StepShare:
    """One rank's split of one step (see the module docstring)."""
    lo, hi = window
    dp = dp_instances(rt, lo, next_start, tp=tp)
    dp_set = iv.merge(dp["start"].to_numpy(), dp["end"].to_numpy())
    end = max(hi, int(dp_set[1][-1])) if dp_set[1].size else hi
    comp = iv.clip(compute, lo, end)
    dp_exposed = iv.subtract(iv.clip(dp_set, lo, end), comp)
    p2p = iv.merge(rt.p2p["start"].to_numpy(), rt.p2p["end"].to_numpy())
    p2p = iv.subtract(iv.clip(p2p, lo, end), iv.union(comp, dp_exposed))
    if p2p_waiting is not None:
        p2p = iv.subtract(p2p, p2p_waiting)
    span = end - lo
    c, d, p = iv.total(comp), iv.total(dp_exposed), iv.total(p2p)
    return StepShare(span / US, c / US, (span - c - d - p) / US, p / US, d / US,
                     float((dp["end"] - dp["start"]).sum() or 0) / US)
