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
from pipeaudit.timeline.p2p_tags import MATCH_COLUMNS, TAG_SCHEMA, match_form
from pipeaudit.timeline.rank import RankTimeline, no_tags
from pipeaudit.timeline.recv_facts import RecvFacts, shifted, summarize


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




def job_tags(ranks: list[RankTimeline]) -> pl.DataFrame:
    """Every rank's ``p2p_tags`` (its :data:`MATCH_COLUMNS`) in one table (ranks in list
    order, rows in rank order), with ``_rank`` and ``_row`` (the row in the rank's own table)."""
    heights = np.array([rt.p2p_tags_packed.rows for rt in ranks], dtype=np.int64)
    if heights.sum() == 0:
        return pl.DataFrame(schema={**{c: TAG_SCHEMA[c] for c in MATCH_COLUMNS},
                                    "_rank": pl.Int64, "_row": pl.Int64})
    frames = [rt.p2p_tags for rt in ranks if rt.p2p_tags_packed.rows]  # each unpacked once
    tags = match_form(pl.concat(frames, how="vertical").select(MATCH_COLUMNS))
    offsets = np.repeat(np.cumsum(heights) - heights, heights)
    return tags.with_columns(
        _rank=pl.Series(np.repeat([rt.rank for rt in ranks], heights), dtype=pl.Int64),
        _row=pl.Series(np.arange(tags.height, dtype=np.int64) - offsets),
    )


#: The job's transfers are matched this many ranks at a time (whole pipeline replicas): a
#: recv's send is in its own replica, and the tables of a 1,024-rank job's transfers, made at
#: once, left about 80 MB more in the process than made in chunks of this size.
CHUNK_RANKS = 64


def settle_transfers(ranks: list[RankTimeline], layout: Layout, positions: dict[int, int]
                     ) -> ClockCorrection:
    """The cross-rank point-to-point work on tables of the job's transfers: name the peers
    (:func:`resolve_peers`), match every recv with its send (:func:`transfer_pairs`), align
    the hosts' clocks (:func:`correct_clocks`, from every pair of the job) and split each
    recv into waiting and transfer (:func:`split_recvs`). The tables hold whole pipeline
    replicas, :data:`CHUNK_RANKS` ranks or so at a time (:func:`replica_chunks`). Each rank's
    ``p2p_tags`` are emptied: its ``recv_summary`` holds what the audit reads of its recvs."""
    if not _on_several_hosts(ranks):  # no clock to align: each chunk is settled and dropped
        for chunk in replica_chunks(ranks, layout):
            _split_and_release(chunk, *_matched(chunk, layout, positions))
        return ClockCorrection(None)
    # the clocks need every pair of the job; each chunk's table of tags is made again after
    # (on the shifted ranks) rather than held: the job's pairs are a third of its tags
    chunks = [(chunk, _matched(chunk, layout, positions)[1])
              for chunk in replica_chunks(ranks, layout)]
    pairs = [p for _, p in chunks]
    clock = correct_clocks(ranks, pl.concat(pairs) if len(pairs) > 1 else pairs[0])
    del pairs
    delta = _clock_deltas(ranks, clock) if clock.offsets_ns else None
    for i, (chunk, chunk_pairs) in enumerate(chunks):
        chunks[i] = None  # type: ignore[call-overload]  # released as it is split
        tags = resolve_peers(job_tags(chunk), chunk, layout, positions)
        if delta is not None:  # a shift keeps every channel's order: the same pairs
            chunk_pairs = shift_pairs(chunk_pairs, delta)
        _split_and_release(chunk, tags, chunk_pairs)
    return clock


def _matched(chunk: list[RankTimeline], layout: Layout, positions: dict[int, int]
             ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The chunk's table of tags with its peers named, and its matched pairs."""
    tags = resolve_peers(job_tags(chunk), chunk, layout, positions)
    return tags, transfer_pairs(tags)


def _split_and_release(chunk: list[RankTimeline], tags: pl.DataFrame, pairs: pl.DataFrame) -> None:
    """Split the chunk's recvs (:func:`split_recvs`) and empty its ranks' ``p2p_tags``."""
    split_recvs(tags, pairs, chunk)
    for rt in chunk:
        rt.p2p_tags_packed = no_tags()


def replica_chunks(ranks: list[RankTimeline], layout: Layout,
                   size: int | None = None) -> list[list[RankTimeline]]:
    """``ranks`` in groups of whole pipeline replicas of about ``size`` ranks (default
    :data:`CHUNK_RANKS`; in list order within each), then the ranks of no replica; one group
    when the layout has one replica."""
    size = CHUNK_RANKS if size is None else size
    if len(layout.replicas) <= 1 or len(ranks) <= size:
        return [list(ranks)]
    replica_of = {r: d for d, rep in enumerate(layout.replicas) for peers in rep for r in peers}
    by_replica: dict[int, list[RankTimeline]] = {}
    for rt in ranks:
        by_replica.setdefault(replica_of.get(rt.rank, -1), []).append(rt)
    chunks: list[list[RankTimeline]] = [[]]
    for d in sorted(k for k in by_replica if k >= 0):
        if len(chunks[-1]) >= size:
            chunks.append([])
        chunks[-1].extend(by_replica[d])
    if -1 in by_replica:
        chunks.append(by_replica[-1])
    return [c for c in chunks if c]


def resolve_peers(tags: pl.DataFrame, ranks: list[RankTimeline], layout: Layout,
                  positions: dict[int, int]) -> pl.DataFrame:
    """The job's table of tags (:func:`job_tags`) with every transfer's peer rank named (from
    its peer stage, within the rank's own replica and tensor-parallel index), and stages
    guessed from the rank put at its place."""
    if tags.height == 0:
        return tags
    stage_rank: dict[tuple[int, int, int], int] = {}  # (replica, tp index, stage) -> rank
    for rt in ranks:
        where = layout.position(rt.rank)
        if where is None:
            continue
        for s in rt.actions["stage"].unique().to_list():
            stage_rank.setdefault((where[0], where[2], int(s)), rt.rank)
    heights = [rt.p2p_tags_packed.rows for rt in ranks]
    where = [layout.position(rt.rank) for rt in ranks]
    placed = [rt.stage_from_rank and rt.rank in positions for rt in ranks]
    cols = tags.columns
    tags = tags.with_columns(
        _placed=pl.Series(np.repeat(placed, heights), dtype=pl.Boolean),
        _pos=pl.Series(np.repeat([positions.get(rt.rank, -1) for rt in ranks], heights),
                       dtype=pl.Int64),
        _in=pl.Series(np.repeat([w is not None for w in where], heights), dtype=pl.Boolean),
        _rep=pl.Series(np.repeat([w[0] if w else -1 for w in where], heights), dtype=pl.Int64),
        _tp=pl.Series(np.repeat([w[2] if w else -1 for w in where], heights), dtype=pl.Int64),
    )
    # a stage guessed from the rank moves to the rank's position, its peer stage with it (the
    # peer is as many stages away as the guess said: one up or down)
    moved = pl.col("_placed") & pl.col("stage").is_not_null()
    tags = tags.with_columns(
        stage=pl.when(moved).then(pl.col("_pos")).otherwise(pl.col("stage")),
        peer_stage=pl.when(moved).then(pl.col("_pos") + pl.col("peer_stage") - pl.col("stage"))
        .otherwise(pl.col("peer_stage")))
    lookup = pl.DataFrame(
        [(d, t, s, r) for (d, t, s), r in stage_rank.items()],
        schema={"_rep": pl.Int64, "_tp": pl.Int64, "peer_stage": pl.Int64, "_peer": pl.Int64},
        orient="row")
    tags = tags.join(lookup, on=["_rep", "_tp", "peer_stage"], how="left", maintain_order="left")
    tags = tags.with_columns(peer_rank=pl.when(pl.col("_in"))
                             .then(pl.coalesce("peer_rank", "_peer")).otherwise("peer_rank"))
    return tags.select(cols)


#: Matched transfers, one row per pair: sender and receiver ranks, their rows in each rank's
#: ``p2p_tags``, and the send's and recv's times (ns).
PAIR_SCHEMA = {"s_rank": pl.Int64, "r_rank": pl.Int64, "s_row": pl.Int64, "r_row": pl.Int64,
               "s_start": pl.Int64, "s_end": pl.Int64, "r_start": pl.Int64, "r_end": pl.Int64}


def transfer_pairs(tags: pl.DataFrame) -> pl.DataFrame:
    """Every matched send/recv pair (``PAIR_SCHEMA``) of the job's table of tags
    (:func:`job_tags`), matched as the module docstring says: the k-th send of a channel with
    the k-th recv, a channel being (sender, receiver, kind, stage) where both sides say what
    they carry and hold as many transfers, else the pair of ranks."""
    tags = tags.filter(pl.col("peer_rank").is_not_null() & pl.col("dir").is_not_null())
    sends = tags.filter(pl.col("dir") == "send").select(
        snd="_rank", rcv="peer_rank", kind="kind", st="stage", start="start", end="end", row="_row")
    recvs = tags.filter(pl.col("dir") == "recv").select(
        snd="peer_rank", rcv="_rank", kind="kind", st="peer_stage", start="start", end="end",
        row="_row")
    key = ["snd", "rcv", "kind", "st"]
    strict = (sends.group_by(key).len("ns").join(recvs.group_by(key).len("nr"), on=key)
              .filter(pl.col("ns") == pl.col("nr")).select(*key, _strict=pl.lit(True)))

    def channel(side: pl.DataFrame) -> pl.DataFrame:
        side = side.join(strict, on=key, how="left").with_columns(
            _strict=pl.col("_strict").fill_null(False))
        side = side.with_columns(kind=pl.when("_strict").then("kind"),
                                 st=pl.when("_strict").then("st"))
        chan = ["snd", "rcv", "_strict", "kind", "st"]
        return side.sort([*chan, "start", "end", "row"], nulls_last=True).with_columns(
            _k=pl.int_range(pl.len(), dtype=pl.Int64).over(chan))

    chan = ["snd", "rcv", "_strict", "kind", "st", "_k"]
    out = channel(sends).join(channel(recvs), on=chan, how="inner", nulls_equal=True,
                              suffix="_r")
    return out.select(s_rank="snd", r_rank="rcv", s_row="row", r_row="row_r", s_start="start",
                      s_end="end", r_start="start_r", r_end="end_r").cast(PAIR_SCHEMA)  # type: ignore[arg-type]


def _on_several_hosts(ranks: list[RankTimeline]) -> bool:
    """True when the ranks name two hosts or more, and every rank names one: the clocks
    :func:`correct_clocks` aligns."""
    hosts = [rt.host for rt in ranks]
    return None not in hosts and len(set(hosts)) > 1


def correct_clocks(ranks: list[RankTimeline], pairs) -> ClockCorrection:
    """Estimate each host's clock offset from matched pairs across hosts and shift its ranks
    (see the module docstring); nothing changes when every rank is on one host. ``pairs``:
    :func:`transfer_pairs`."""
    if not _on_several_hosts(ranks):
        return ClockCorrection(None)
    host = {rt.rank: rt.host for rt in ranks}
    hosts = sorted(set(host.values()))  # every rank names one
    ref = host[min(host)]
    p = pairs
    host_of = pl.DataFrame({"rank": list(host), "host": list(host.values())},
                           schema={"rank": pl.Int64, "host": pl.Utf8})
    p = (p.join(host_of.rename({"rank": "s_rank", "host": "hs"}), on="s_rank", how="left")
         .join(host_of.rename({"rank": "r_rank", "host": "hr"}), on="r_rank", how="left")
         .filter(pl.col("hs") != pl.col("hr")))
    # o(recv host) - o(send host) <= r1 - s0
    hi = dict(p.filter(pl.col("hs") == ref).group_by("hr").agg(
        (pl.col("r_end") - pl.col("s_start")).min()).iter_rows())
    lo = dict(p.filter(pl.col("hr") == ref).group_by("hs").agg(
        (pl.col("s_start") - pl.col("r_end")).max()).iter_rows())
    out = ClockCorrection(ref, pairs=p.height)
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


def _clock_deltas(ranks: list[RankTimeline], clock: ClockCorrection) -> pl.DataFrame:
    """``_rank``, ``_d``: how far :func:`correct_clocks` moved each rank (ns)."""
    return pl.DataFrame({"_rank": [rt.rank for rt in ranks],
                         "_d": [-clock.offsets_ns.get(rt.host or "", 0) for rt in ranks]},
                        schema={"_rank": pl.Int64, "_d": pl.Int64})


def shift_pairs(pairs: pl.DataFrame, delta: pl.DataFrame) -> pl.DataFrame:
    """``pairs`` with the times moved by each side's rank's ``delta`` (:func:`_clock_deltas`)."""
    p = (pairs.join(delta.rename({"_rank": "s_rank", "_d": "ds"}), on="s_rank", how="left",
                    maintain_order="left")
         .join(delta.rename({"_rank": "r_rank", "_d": "dr"}), on="r_rank", how="left",
               maintain_order="left"))
    return p.with_columns(s_start=pl.col("s_start") + pl.col("ds"), s_end=pl.col("s_end") + pl.col("ds"),
                          r_start=pl.col("r_start") + pl.col("dr"), r_end=pl.col("r_end") + pl.col("dr")
                          ).select(list(PAIR_SCHEMA))


def split_recvs(tags: pl.DataFrame, pairs: pl.DataFrame, ranks: list[RankTimeline]) -> None:
    """Each rank's recvs, matched or not, split into waiting and transfer from the chunk's
    table of tags (:func:`job_tags`) and its :func:`transfer_pairs`, both on the ranks'
    current clocks; what the audit reads of them is kept (``RankTimeline.recv_summary``,
    :func:`pipeaudit.timeline.recv_facts.summarize`), the table is not."""
    if tags.height == 0:
        for rt in ranks:
            rt.recv_summary = RecvFacts()
        return
    p = pairs.select(_rank="r_rank", _row="r_row", _s0="s_start")
    t = tags.join(p, on=["_rank", "_row"], how="left", maintain_order="left")
    dur = pl.col("end") - pl.col("start")
    wait = pl.min_horizontal(pl.max_horizontal(pl.col("_s0") - pl.col("start"), 0), dur)
    t = t.with_columns(_recv=(pl.col("dir") == "recv").fill_null(False)).with_columns(
        matched=pl.col("_s0").is_not_null(),
        waiting=pl.when(pl.col("_s0").is_not_null()).then(wait),
    ).with_columns(transfer=dur - pl.col("waiting"))
    is_recv = t["_recv"].to_numpy()
    heights = np.array([rt.p2p_tags_packed.rows for rt in ranks], dtype=np.int64)
    bounds = np.concatenate([[0], np.cumsum(heights)])
    seen = np.concatenate([[0], np.cumsum(is_recv, dtype=np.int64)])
    counts = seen[bounds[1:]] - seen[bounds[:-1]]
    facts = summarize(t.filter(pl.col("_recv")), [(rt.rank, n) for rt, n in zip(ranks, counts.tolist()) if n])
    for rt in ranks:
        rt.recv_summary = facts.get(rt.rank, RecvFacts())


def shift_rank(rt: RankTimeline, delta: int) -> None:
    """Move every time of one rank by ``delta`` ns (in place)."""
    times = ("start", "end", "compute_start", "compute_end", "host_start", "host_end")
    rt.actions = rt.actions.with_columns([pl.col(c) + delta for c in times if c in rt.actions.columns])
    rt.shift_packed(delta)  # compute, comm, other_compute, p2p
    rt.activity = (rt.activity[0] + delta, rt.activity[1] + delta)
    rt.steps = rt.steps.with_columns(pl.col("start") + delta, pl.col("end") + delta)
    rt.memory = rt.memory.with_columns(pl.col("ts") + delta)
    rt.split_marks = [t + delta for t in rt.split_marks]
    if rt.collectives is not None and rt.collectives.height:
        rt.collectives = rt.collectives.with_columns(pl.col("start") + delta, pl.col("end") + delta)
    if rt.p2p_tags_packed.rows:  # tags not settled yet (settled ones are empty)
        rt.p2p_tags = rt.p2p_tags.with_columns(pl.col("start") + delta, pl.col("end") + delta)
    if rt.recv_summary is not None:
        rt.recv_summary = shifted(rt.recv_summary, delta)
