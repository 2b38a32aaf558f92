"""Where each rank's step goes: compute, pipeline bubble, exposed point-to-point transfer,
exposed data-parallel communication.

For rank r in step k the span is E_k = [W_k start, max(W_k end, end of r's collectives of the
step)]: the step window, stretched by the gradient sync that follows the last backward
(docs/metrics.md's step time stays |W_k|). Over E_k:

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


class RankComm:
    """One rank's communication, prepared once for :meth:`share` of each of its steps: the
    collectives by start (those inside an action dropped when the job is tensor parallel),
    the merged point-to-point set and ``waiting``, its recvs' waiting for the sender (numpy
    arrays, no table filter per step)."""

    def __init__(self, rt: RankTimeline, *, tp: bool, waiting: iv.Intervals | None = None) -> None:
        c = rt.collectives
        start, end = c["start"].to_numpy(), c["end"].to_numpy()
        keep = ~_inside_actions(rt, start) if tp and c.height and rt.actions.height else \
            np.ones(start.size, dtype=bool)
        order = np.argsort(start[keep], kind="stable")
        self.dp_start, self.dp_end = start[keep][order], end[keep][order]
        self.p2p = rt.p2p  # merged point-to-point instances
        self.waiting = waiting

    def dp_in(self, lo: int, hi: int | None) -> tuple[np.ndarray, np.ndarray]:
        """(starts, ends) of the collectives that start in [lo, hi) (hi None: no end)."""
        a = np.searchsorted(self.dp_start, lo, side="left")
        b = self.dp_start.size if hi is None else np.searchsorted(self.dp_start, hi, side="left")
        return self.dp_start[a:b], self.dp_end[a:b]

    def share(self, compute: iv.Intervals, window: tuple[int, int], next_start: int | None) -> StepShare:
        """:func:`step_share` of one step of this rank."""
        lo, hi = window
        dp_s, dp_e = self.dp_in(lo, next_start)
        dp_set = iv.merge(dp_s, dp_e)
        end = max(hi, int(dp_set[1][-1])) if dp_set[1].size else hi
        comp = iv.clip(compute, lo, end)
        dp_exposed = iv.subtract(iv.clip(dp_set, lo, end), comp)
        a = np.searchsorted(self.p2p[1], lo, side="right")
        b = np.searchsorted(self.p2p[0], end, side="left")
        p2p = iv.subtract(iv.clip((self.p2p[0][a:b], self.p2p[1][a:b]), lo, end),
                          iv.union(comp, dp_exposed))
        if self.waiting is not None:
            p2p = iv.subtract(p2p, self.waiting)
        span = end - lo
        c, d, p = iv.total(comp), iv.total(dp_exposed), iv.total(p2p)
        return StepShare(span / US, c / US, (span - c - d - p) / US, p / US, d / US,
                         float(int((dp_e - dp_s).sum())) / US)


def _inside_actions(rt: RankTimeline, t: np.ndarray) -> np.ndarray:
    """Which times lie inside one of the rank's action spans on the host."""
    a = rt.actions.sort("host_start")
    s, e = a["host_start"].to_numpy(), a["host_end"].to_numpy()
    k = np.searchsorted(s, t, side="right") - 1
    return (k >= 0) & (t < e[np.maximum(k, 0)])


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
    p2p = iv.subtract(iv.clip(rt.p2p, lo, end), iv.union(comp, dp_exposed))
    if p2p_waiting is not None:
        p2p = iv.subtract(p2p, p2p_waiting)
    span = end - lo
    c, d, p = iv.total(comp), iv.total(dp_exposed), iv.total(p2p)
    return StepShare(span / US, c / US, (span - c - d - p) / US, p / US, d / US,
                     float((dp["end"] - dp["start"]).sum() or 0) / US)
