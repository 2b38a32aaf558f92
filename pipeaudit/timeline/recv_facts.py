"""What the audit reads of each rank's point-to-point receives, for all ranks at once.

``RankTimeline.recvs`` (:func:`pipeaudit.timeline.p2p.split_recvs`) holds every recv with its
waiting and transfer, null where the recv was not matched with its send. The audit needs, per
rank, the totals over the matched recvs, the intervals spent waiting, and the totals per
receiving stage: all read here from one table of every rank's recvs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl

from pipeaudit.timeline import intervals as iv

US = 1000.0  # ns per µs


@dataclass(frozen=True)
class RecvFacts:
    """One rank's receives: ``count`` recvs, ``matched`` of them with their send; the
    matched ones' waiting and transfer (µs, None when none matched), the intervals spent
    waiting (None: the rank has no recv), and per receiving stage (waiting, transfer) µs."""

    count: int = 0
    matched: int = 0
    wait_us: float | None = None
    transfer_us: float | None = None
    waiting: iv.Intervals | None = None
    by_stage: dict[int, tuple[float, float]] = field(default_factory=dict)


def recv_facts(ranks) -> dict[int, RecvFacts]:
    """Rank -> its :class:`RecvFacts` (a rank without recvs gets the empty one)."""
    out = {rt.rank: RecvFacts() for rt in ranks}
    frames, owners = [], []
    for rt in ranks:
        if rt.recvs is not None and rt.recvs.height:
            frames.append(rt.recvs)
            owners.append((rt.rank, rt.recvs.height))
    if not frames:
        return out
    t = pl.concat(frames, how="vertical").select(
        pl.col("start"), pl.col("stage").fill_null(-1), pl.col("matched"),
        pl.col("waiting").fill_null(0), pl.col("transfer").fill_null(0))
    start, stage, matched = t["start"].to_numpy(), t["stage"].to_numpy(), t["matched"].to_numpy()
    wait, transfer = t["waiting"].to_numpy(), t["transfer"].to_numpy()
    lo = 0
    for rank, n in owners:
        sl = slice(lo, lo + n)
        lo += n
        m = matched[sl]
        w, tr, st, s0 = wait[sl][m], transfer[sl][m], stage[sl][m], start[sl][m]
        keep = w > 0
        waiting = iv.merge(s0[keep], s0[keep] + w[keep])
        if not m.any():
            out[rank] = RecvFacts(count=n, waiting=waiting)
            continue
        by_stage = {}
        for s in np.unique(st[st >= 0]).tolist():
            on = st == s
            by_stage[int(s)] = (float(int(w[on].sum())) / US, float(int(tr[on].sum())) / US)
        out[rank] = RecvFacts(count=n, matched=int(m.sum()), wait_us=float(int(w.sum())) / US,
                              transfer_us=float(int(tr.sum())) / US, waiting=waiting,
                              by_stage=by_stage)
    return out
