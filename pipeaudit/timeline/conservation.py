"""Compute conservation: every op the schedule's thread runs lies in exactly one action or in a
named category that is no action.

A reading from the ops (:mod:`pipeaudit.timeline.infer`) leaves out, by construction, the
point-to-point ops and their preparation, the optimizer's and FSDP's spans. What else lies in
no action must be the step's own bookkeeping, and that is known by where it runs once every
action has its step:

- **wrap-up**: after the rank's last action of a step and before its first action of the next
  (gradient scaling and reduction, the merge of the last stage's outputs, the next step's
  split of the batch into microbatches);
- **start-up**: before the rank's first action of the first step;
- **gradient scaling**: in-place scaling of the gradients outside any action, wherever it runs
  (torch scales a chunk's gradients after its last backward, mid-step under a looped
  schedule).

Compute in no action *between* a step's first and last action is work the reading missed (each
op at the least time its name takes in no action on the rank: one descheduled bookkeeping op is
no missed work). The
coverage the report prints is the share of the thread's compute that is accounted for: in an
action, or in start-up or wrap-up.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from pipeaudit.timeline.account import OpAccount
from pipeaudit.timeline.rank import RankTimeline

__all__ = ["OpAccount", "settle_accounts"]


def settle_accounts(ranks: Sequence[RankTimeline]) -> None:
    """Name each inferred rank's loose compute by where it runs against its steps' actions, and
    set the rank's coverage to the share accounted for (in place)."""
    for rt in ranks:
        acc = rt.account
        if acc is None or rt.actions.height == 0:
            continue
        # the ops ran on the host: the actions' host spans (on GPU ``start``/``end`` are the
        # device's, which a host running ahead of its kernels does not match)
        host = "host_start" in rt.actions.columns
        lo_col, hi_col = ("host_start", "host_end") if host else ("start", "end")
        per_step = (rt.actions.filter(pl.col("step") >= 0).group_by("step")
                    .agg(lo=pl.col(lo_col).min(), hi=pl.col(hi_col).max()).sort("lo"))
        lo, hi = per_step["lo"].to_numpy(), per_step["hi"].to_numpy()
        starts, ends = acc.loose_starts, acc.loose_ends
        k = np.searchsorted(lo, starts, side="right") - 1  # the last step begun before the op
        inside = np.zeros(starts.size, dtype=bool)
        has = k >= 0
        inside[has] = starts[has] < hi[k[has]]
        dur = ends - starts
        scaling = acc.loose_scaling
        acc.grad_scaling_ns = int(dur[scaling].sum())  # wherever it runs
        inside &= ~scaling
        has &= ~scaling
        acc.unexplained_ns = int(dur[inside].sum())
        acc.missed_ns = int(_least_by_name(dur, acc.loose_names)[inside].sum())
        acc.start_up_ns = int(dur[~has & ~scaling].sum())  # before the first step's first action
        acc.wrap_up_ns = int(dur[has & ~inside].sum())  # after a step's last action
        rt.coverage = acc.coverage


def _least_by_name(dur: np.ndarray, names: np.ndarray | None) -> np.ndarray:
    """Each loose op's time as the least of its name's loose ops on the rank: a host
    descheduled in one bookkeeping op lends it milliseconds once, never every time, and one
    such op is no missed work."""
    if names is None or names.size != dur.size or dur.size == 0:
        return dur
    order = np.argsort(names, kind="stable")
    uniq, first = np.unique(names[order], return_index=True)
    least = np.minimum.reduceat(dur[order], first)
    return least[np.searchsorted(uniq, names)]
