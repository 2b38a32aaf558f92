"""What the audit reads of each rank's point-to-point receives, made a chunk of ranks at a time.

:func:`pipeaudit.timeline.p2p.split_recvs` splits every recv of a chunk of ranks into waiting
and transfer (null where the recv was not matched with its send) and keeps, per rank, only
what the audit needs (``RankTimeline.recv_summary``): the totals over the matched recvs, the
intervals spent waiting, and the totals per receiving stage, read here from the chunk's table
of recvs. A 1,024-rank job's recvs, held as a table per rank until the audit, were 19 MB of
columns and more of allocator pages.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

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
    """Rank -> its :class:`RecvFacts` (the empty one for a rank without recvs, or not settled)."""
    return {rt.rank: rt.recv_summary if rt.recv_summary is not None else RecvFacts()
            for rt in ranks}


def summarize(recvs: pl.DataFrame, owners: list[tuple[int, int]]) -> dict[int, RecvFacts]:
    """Rank -> its :class:`RecvFacts`, from ``recvs`` (``start``, ``stage``, ``matched``,
    ``waiting``, ``transfer``: every rank's recvs, rank after rank) and ``owners`` ((rank, how
    many rows) in the table's order, ranks without recvs left out)."""
    out: dict[int, RecvFacts] = {}
    if not owners:
        return out
    t = recvs.select(
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


def shifted(facts: RecvFacts, delta_ns: int) -> RecvFacts:
    """``facts`` with its waiting intervals moved ``delta_ns`` later."""
    if facts.waiting is None:
        return facts
    return replace(facts, waiting=(facts.waiting[0] + delta_ns, facts.waiting[1] + delta_ns))
