"""The replay ideal of many steps and pipeline replicas at once.

The replay ideal of a step (docs/metrics.md) replays the observed per-rank order with the measured
compute durations and free communication: every action starts when its rank is free and its
inputs are done (:mod:`pipeaudit.schedules.replay`, whose event-driven loop visits one
action at a time in Python). Here the same longest-path times are found for a whole batch of
independent replays together, as numpy over arrays: each round computes every action whose
rank predecessor and producers are all done, so a batch takes as many rounds as its longest
chain of dependent actions, whatever the number of steps and replicas in it.

Only the figures the audit reads come back (the makespan and each rank's bubble), equal to
:func:`~pipeaudit.schedules.replay.replay`'s. A replay that the event loop would refuse (an
action on a stage placed elsewhere, a duplicated action, a missing producer, a deadlock) is
answered None: the caller replays it with :func:`~pipeaudit.schedules.replay.replay` to get
its exact error.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeaudit.timeline.columns import B_CODE, F_CODE, I_CODE, W_CODE, ActionArrays


@dataclass(frozen=True)
class ReplayIdeal:
    """What the audit reads of a replay (see :class:`~pipeaudit.schedules.ReplayResult`)."""

    makespan: float
    rank_bubble: tuple[float, ...]
    bubble: float


@dataclass(frozen=True)
class ReplayGroup:
    """One replay: the step, the rank (index in the arrays) at each position, and the
    position that holds each stage."""

    step: int
    ranks: tuple[int, ...]
    placement: tuple[int, ...]


def replay_ideals(arr: ActionArrays, groups: list[ReplayGroup]) -> list[ReplayIdeal | None]:
    """The replay of every group (None where :func:`replay` must answer; see the module
    docstring)."""
    if not groups:
        return []
    pieces, gid, pos, last_stage, pl_off, n_pos = [], [], [], [], [], []
    places: list[int] = []
    for g, grp in enumerate(groups):
        for p, ri in enumerate(grp.ranks):
            sl = arr.rows(ri, grp.step)
            pieces.append(np.arange(sl.start, sl.stop, dtype=np.int64))
            gid.append(np.full(sl.stop - sl.start, g, dtype=np.int64))
            pos.append(np.full(sl.stop - sl.start, p, dtype=np.int64))
        pl_off.append(len(places))
        places.extend(grp.placement)
        last_stage.append(len(grp.placement) - 1)
        n_pos.append(len(grp.ranks))
    rows = np.concatenate(pieces)
    g_of = np.concatenate(gid)
    p_of = np.concatenate(pos)
    n = rows.size
    stage = arr.stage[rows]
    kind = arr.kind[rows].astype(np.int64)
    mb = arr.microbatch[rows]
    dur = arr.compute_ns[rows].astype(np.float64)
    G = len(groups)
    ok = np.array([all(0 <= p < len(grp.ranks) for p in grp.placement) for grp in groups], dtype=bool)
    last = np.asarray(last_stage, dtype=np.int64)[g_of]
    offsets = np.asarray(pl_off, dtype=np.int64)
    placement = np.asarray(places, dtype=np.int64)

    # what the event loop refuses: a stage out of range or placed on another rank, a kind
    # it does not know, a negative microbatch, an action (or input gradient) twice
    bad = (stage < 0) | (stage > last) | (mb < 0) | (kind < 0) | (kind > W_CODE)
    safe_stage = np.clip(stage, 0, np.maximum(last, 0))
    bad |= placement[offsets[g_of] + safe_stage] != p_of
    channel = np.where(kind == F_CODE, 0, np.where(kind == W_CODE, 3, 1))  # B and I: the gradient
    n_st = int(stage.max()) + 3 if n else 2  # stage + 1 and the stage after it fit
    n_mb = int(mb.max()) + 1 if n else 1
    s1 = np.clip(stage, -1, n_st - 2) + 1

    def key(g, s_plus_1, ch, m):
        return ((g * n_st + s_plus_1) * 4 + ch) * n_mb + m

    own = key(g_of, s1, channel, np.maximum(mb, 0))
    srt = np.sort(own)
    dup = srt[1:][srt[1:] == srt[:-1]]
    if dup.size:
        bad |= np.isin(own, dup)
    ok[np.unique(g_of[bad])] = False

    # producers: F -> (s, F done); B -> (s, gradient); I -> (s, gradient) and (s, I done)
    prod_keys = [key(g_of, s1, np.zeros_like(kind), mb)[kind == F_CODE],
                 key(g_of, s1, np.ones_like(kind), mb)[(kind == B_CODE) | (kind == I_CODE)],
                 key(g_of, s1, np.full_like(kind, 2), mb)[kind == I_CODE]]
    prod_rows = [np.flatnonzero(kind == F_CODE),
                 np.flatnonzero((kind == B_CODE) | (kind == I_CODE)),
                 np.flatnonzero(kind == I_CODE)]
    pk = np.concatenate(prod_keys)
    pr = np.concatenate(prod_rows)
    order = np.argsort(pk, kind="stable")
    pk, pr = pk[order], pr[order]

    NONE_PREV, NONE_DEP = n, n + 1  # slots holding 0.0 (a rank starts free) and -inf

    def producer(valid, s_plus_1, ch):
        q = key(g_of, s_plus_1, ch, np.maximum(mb, 0))
        j = np.minimum(np.searchsorted(pk, q), max(pk.size - 1, 0))
        found = valid & (pk.size > 0) & (pk[j] == q) if pk.size else np.zeros(n, dtype=bool)
        missing = valid & ~found
        return np.where(found, pr[j] if pk.size else 0, NONE_DEP), missing

    is_f, is_w = kind == F_CODE, kind == W_CODE
    is_bi = (kind == B_CODE) | (kind == I_CODE)
    dep1, miss1 = producer(is_f & (stage > 0), s1 - 1, 0)  # F(s-1)
    dep_w, miss_w = producer(is_w, s1, 2)  # I(s)
    dep1 = np.where(is_w, dep_w, dep1)
    dep_f, miss_f = producer(is_bi, s1, 0)  # F(s)
    dep1 = np.where(is_bi, dep_f, dep1)
    dep2, miss2 = producer(is_bi & (stage < last), np.minimum(s1 + 1, n_st - 1), 1)  # grad of s+1
    ok[np.unique(g_of[miss1 | miss_w | miss_f | miss2])] = False

    same_rank = np.zeros(n, dtype=bool)
    same_rank[1:] = (g_of[1:] == g_of[:-1]) & (p_of[1:] == p_of[:-1])
    prev = np.where(same_rank, np.arange(n) - 1, NONE_PREV)

    # rounds: an action is done once its rank's previous action and its producers are, so
    # a round can only do the next action of each rank (lane): each round looks at those
    # alone, not at every action left
    vals = np.full(n + 2, np.nan)
    vals[NONE_PREV], vals[NONE_DEP] = 0.0, -np.inf
    start = np.full(n, np.nan)
    lane_lo = np.flatnonzero(~same_rank)
    lane_hi = np.append(lane_lo[1:], n)
    live = ok[g_of[lane_lo]] if n else np.zeros(0, dtype=bool)
    at, end = lane_lo[live], lane_hi[live]  # each live lane's next action, its end
    while at.size:
        s = np.maximum(np.maximum(vals[prev[at]], vals[dep1[at]]), vals[dep2[at]])
        ready = ~np.isnan(s)
        if not ready.any():
            break
        done = at[ready]
        start[done] = s[ready]
        vals[done] = s[ready] + dur[done]
        at = at + ready
        more = at < end
        at, end = at[more], end[more]
    if at.size:  # a cycle: the event loop deadlocks
        ok[np.unique(g_of[at])] = False

    out: list[ReplayIdeal | None] = []
    bounds = np.searchsorted(g_of, np.arange(G + 1))
    ends = vals[:n]
    for g in range(G):
        if not ok[g]:
            out.append(None)
            continue
        lo, hi = int(bounds[g]), int(bounds[g + 1])
        P = n_pos[g]
        if hi > lo:
            t0 = float(start[lo:hi].min())
            makespan = float(ends[lo:hi].max()) - t0
            busy = np.bincount(p_of[lo:hi], weights=dur[lo:hi], minlength=P)
        else:
            makespan, busy = 0.0, np.zeros(P)
        rank_bubble = tuple((1.0 - float(b) / makespan) if makespan > 0 else 0.0 for b in busy)
        out.append(ReplayIdeal(makespan, rank_bubble, sum(rank_bubble) / P if P else 0.0))
    return out
