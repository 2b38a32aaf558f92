"""Point-to-point transfers across ranks: every recv matched with its send, the recv's time
split into waiting and transfer, and the clocks of different hosts aligned.

A recv's time mixes waiting for its peer (the peer had not started sending) with moving the
bytes. With its matching send on the peer rank, the split is exact: waiting is the part of
the recv before the send started, transfer the rest. Waiting is pipeline bubble made visible;
exposed transfer is communication cost.

Matching: the transfers of one channel (sender rank, receiver rank, what they carry: the
forward activations or backward gradients of one stage) keep their order, so the k-th recv
of a channel matches its k-th send. Where the two sides cannot both say what they carry
(NCCL metadata alone), the channel is the pair of ranks.

Clocks: ranks on different hosts have different clocks (each trace is already on its own
host's epoch clock, rebased on ``baseTimeNanoseconds``). A recv cannot end before its send
starts, in both directions between two hosts; the offset of host B against the reference
host (the lowest rank's) lies in ``[max(send start - recv end) over B->A, min(recv end - send
start) over A->B]``, and the middle of that interval is applied to every event of B's ranks.
The correction and its uncertainty (half the interval) are reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl

from pipeaudit.timeline.layout import Layout
from pipeaudit.timeline.rank import RankTimeline

RECV_SCHEMA = {"start": pl.Int64, "end": pl.Int64, "stage": pl.Int64, "kind": pl.Utf8,
               "peer_rank": pl.Int64, "matched": pl.Boolean, "waiting": pl.Int64,
               "transfer": pl.Int64}


@dataclass
class ClockCorrection:
    """Offsets applied to hosts' clocks (ns: subtracted from every time of the host's ranks)."""

    reference: str | None
    offsets_ns: dict[str, int] = field(default_factory=dict)
    uncertainty_ns: dict[str, int] = field(default_factory=dict)
    pairs: int = 0

    def to_dict(self) -> dict:
        return {"reference_host": self.reference,
                "offsets_us": {h: v / 1000.0 for h, v in self.offsets_ns.items()},
                "uncertainty_us": {h: v / 1000.0 for h, v in self.uncertainty_ns.items()},
                "matched_pairs": self.pairs}


def resolve_peers(ranks: list[RankTimeline], layout: Layout, positions: dict[int, int]) -> None:
    """Name every tagged transfer's peer rank (from its peer stage, within the rank's own
    replica and tensor-parallel index), and put stages guessed from the rank at its place."""
    stage_rank: dict[tuple[int, int, int], int] = {}  # (replica, tp index, stage) -> rank
    for rt in ranks:
        where = layout.position(rt.rank)
        if where is None:
            continue
        for s in rt.actions["stage"].unique().to_list():
            stage_rank.setdefault((where[0], where[2], int(s)), rt.rank)
    for rt in ranks:
        tags = rt.p2p_tags
        if tags.height == 0:
            continue
        where = layout.position(rt.rank)
        if rt.stage_from_rank and rt.rank in positions:
            delta = pl.col("peer_stage") - pl.col("stage")
            tags = tags.with_columns(stage=pl.when(pl.col("stage").is_not_null())
                                     .then(pl.lit(positions[rt.rank], dtype=pl.Int64)))
            tags = tags.with_columns(peer_stage=pl.col("stage") + delta)
        if where is not None:
            peer = [stage_rank.get((where[0], where[2], int(ps))) if ps is not None else None
                    for ps in tags["peer_stage"].to_list()]
            tags = tags.with_columns(peer_rank=pl.coalesce(
                pl.col("peer_rank"), pl.Series(peer, dtype=pl.Int64)))
        rt.p2p_tags = tags


def match_transfers(ranks: list[RankTimeline]) -> list[tuple[int, int, int, int, int, int, int, int]]:
    """Matched (send rank, recv rank, send row, recv row, send start, send end, recv start,
    recv end) of every channel (see the module docstring)."""
    by_rank = {rt.rank: rt.p2p_tags for rt in ranks}
    sends: dict[tuple, list] = {}
    recvs: dict[tuple, list] = {}
    for rank, tags in by_rank.items():
        for i, (d, peer, stage, peer_stage, kind, start, end) in enumerate(tags.select(
                "dir", "peer_rank", "stage", "peer_stage", "kind", "start", "end").iter_rows()):
            if peer is None or d is None:
                continue
            if d == "send":
                key = (rank, peer, kind, stage)
                sends.setdefault(key, []).append((start, end, i))
            else:
                key = (peer, rank, kind, peer_stage)
                recvs.setdefault(key, []).append((start, end, i))
    out = []
    loose_s: dict[tuple, list] = {}
    loose_r: dict[tuple, list] = {}
    for key in set(sends) | set(recvs):
        s_list, r_list = sorted(sends.get(key, [])), sorted(recvs.get(key, []))
        if key[2] is None or key[3] is None or len(s_list) != len(r_list):
            loose_s.setdefault(key[:2], []).extend(s_list)
            loose_r.setdefault(key[:2], []).extend(r_list)
            continue
        out += [(key[0], key[1], s[2], r[2], s[0], s[1], r[0], r[1]) for s, r in zip(s_list, r_list)]
    for key in set(loose_s) | set(loose_r):
        s_list, r_list = sorted(loose_s.get(key, [])), sorted(loose_r.get(key, []))
        out += [(key[0], key[1], s[2], r[2], s[0], s[1], r[0], r[1]) for s, r in zip(s_list, r_list)]
    return out


def correct_clocks(ranks: list[RankTimeline], pairs) -> ClockCorrection:
    """Estimate each host's clock offset from matched pairs across hosts and shift its ranks
    (see the module docstring); nothing changes when every rank is on one host."""
    host = {rt.rank: rt.host for rt in ranks}
    hosts = sorted({h for h in host.values() if h is not None})
    if len(hosts) < 2 or any(h is None for h in host.values()):
        return ClockCorrection(None)
    ref = host[min(host)]
    lo: dict[str, float] = {}
    hi: dict[str, float] = {}
    n = 0
    for s_rank, r_rank, _, _, s0, _, _, r1 in pairs:
        hs, hr = host[s_rank], host[r_rank]
        if hs == hr:
            continue
        n += 1
        # o(recv host) - o(send host) <= r1 - s0
        if hs == ref:
            hi[hr] = min(hi.get(hr, np.inf), r1 - s0)
        elif hr == ref:
            lo[hs] = max(lo.get(hs, -np.inf), s0 - r1)
    out = ClockCorrection(ref, pairs=n)
    for h in hosts:
        if h == ref or (h not in lo and h not in hi):
            continue
        a, b = lo.get(h, -np.inf), hi.get(h, np.inf)
        if np.isfinite(a) and np.isfinite(b):
            out.offsets_ns[h] = int(round((a + b) / 2))
            out.uncertainty_ns[h] = int(abs(b - a) / 2)
        else:  # transfers one way only: the least correction that makes them possible
            out.offsets_ns[h] = int(min(b, 0) if np.isfinite(b) else max(a, 0))
            out.uncertainty_ns[h] = -1  # unbounded
    for rt in ranks:
        delta = out.offsets_ns.get(rt.host or "", 0)
        if delta:
            shift_rank(rt, -delta)
    return out


def split_recvs(ranks: list[RankTimeline], pairs) -> None:
    """Each rank's recvs (``RankTimeline.recvs``): matched or not, waiting and transfer."""
    matched = {(r_rank, r_row): s0 for _, r_rank, _, r_row, s0, _, _, _ in pairs}
    for rt in ranks:
        tags = rt.p2p_tags.with_row_index("_row")
        recv = tags.filter(pl.col("dir") == "recv")
        rows = []
        for row, start, end, stage, kind, peer in recv.select(
                "_row", "start", "end", "stage", "kind", "peer_rank").iter_rows():
            s0 = matched.get((rt.rank, row))
            dur = end - start
            wait = min(max(s0 - start, 0), dur) if s0 is not None else None
            rows.append((start, end, stage, kind, peer, s0 is not None, wait,
                         dur - wait if wait is not None else None))
        rt.recvs = pl.DataFrame(rows, schema=RECV_SCHEMA, orient="row")


def shift_rank(rt: RankTimeline, delta: int) -> None:
    """Move every time of one rank by ``delta`` ns (in place)."""
    times = ("start", "end", "compute_start", "compute_end", "host_start", "host_end")
    rt.actions = rt.actions.with_columns([pl.col(c) + delta for c in times if c in rt.actions.columns])
    rt.compute = rt.compute.with_columns(pl.col("start") + delta, pl.col("end") + delta)
    rt.comm = (rt.comm[0] + delta, rt.comm[1] + delta)
    rt.activity = (rt.activity[0] + delta, rt.activity[1] + delta)
    rt.other_compute = (rt.other_compute[0] + delta, rt.other_compute[1] + delta)
    rt.steps = rt.steps.with_columns(pl.col("start") + delta, pl.col("end") + delta)
    rt.memory = rt.memory.with_columns(pl.col("ts") + delta)
    rt.split_marks = [t + delta for t in rt.split_marks]
    for name in ("collectives", "p2p", "p2p_tags", "recvs"):
        df = getattr(rt, name)
        if df is not None and df.height:
            setattr(rt, name, df.with_columns(pl.col("start") + delta, pl.col("end") + delta))
