"""What each point-to-point transfer of one rank is: send or recv, of which stage's forward
activations or backward gradients, for which microbatch, and to or from whom.

An instance is a NCCL kernel (GPU traces) or a gloo/nccl lifetime span or c10d op (CPU
traces). Evidence, strongest first:

1. NCCL's own metadata on the kernel: ``Src Rank`` (a recv) or ``Dst Rank`` (a send);
2. torch's runtime annotation around it (around the kernel's launch on GPU):
   ``PP:<stage>RECV_F<mb>`` receives stage s-1's activations for stage s, ``RECV_B`` stage
   s+1's gradients, ``SEND_F`` / ``SEND_B`` send them on;
3. the op's name (``c10d::recv_``, ``gloo:send``, ...) for the direction, and the rank's own
   actions for the rest: a recv feeds the first action whose compute starts once the data
   is in (an F receives from stage s-1, a B or I from s+1), a send carries the output of the
   last action whose compute ended when it started.

Peers named by stage are resolved to ranks across ranks (:mod:`pipeaudit.timeline.p2p`).

Every step is a search over sorted arrays (``numpy.searchsorted``), not a loop over the
transfers: a rank holds thousands of them (two per action on a CPU trace).
"""

from __future__ import annotations

import re

import numpy as np
import polars as pl

from pipeaudit.timeline.ops import RankOps

P2P_SPAN_RE = re.compile(r"^PP:(\d+)(SEND|RECV)_([FB])(\d+)$")
TAG_SCHEMA = {
    "name": pl.Utf8, "start": pl.Int64, "end": pl.Int64, "dir": pl.Utf8,
    "peer_rank": pl.Int64, "stage": pl.Int64, "peer_stage": pl.Int64, "kind": pl.Utf8,
    "microbatch": pl.Int64, "evidence": pl.Utf8,
}
#: The tag columns the job's matching and the recv split read (:mod:`pipeaudit.timeline.p2p`):
#: what a reduced rank keeps of its tags.
MATCH_COLUMNS = ["dir", "peer_rank", "stage", "peer_stage", "kind", "start", "end"]
#: ``peer_stage`` is ``stage`` + this: where F data comes from / goes to, and B data.
PEER_DELTA = {("recv", "F"): -1, ("send", "F"): 1, ("recv", "B"): 1, ("send", "B"): -1}
#: How a reduced rank keeps its tags until the job's transfers are settled: the
#: :data:`MATCH_COLUMNS` with the two words as enums and the stages and ranks as 32-bit
#: integers (each is an int64 or a string in :data:`TAG_SCHEMA`). A 1,024-rank job held
#: 22 MB of them; the matching reads them back in :data:`TAG_SCHEMA` (:func:`match_form`).
KEPT_SCHEMA = {
    "dir": pl.Enum(["send", "recv"]), "peer_rank": pl.Int32, "stage": pl.Int32,
    "peer_stage": pl.Int32, "kind": pl.Enum(["F", "B"]), "start": pl.Int64, "end": pl.Int64,
}


def kept_form(tags: pl.DataFrame) -> pl.DataFrame:
    """``tags`` (:data:`TAG_SCHEMA`) as a rank keeps them (:data:`KEPT_SCHEMA`)."""
    return tags.select(MATCH_COLUMNS).cast(KEPT_SCHEMA)  # type: ignore[arg-type]


def match_form(tags: pl.DataFrame) -> pl.DataFrame:
    """Kept tags in the matching's types (:data:`TAG_SCHEMA`, other columns as they are)."""
    return tags.cast({c: TAG_SCHEMA[c] for c in MATCH_COLUMNS})  # type: ignore[arg-type]


#: Clocks written to the nanosecond from microseconds with three decimals: a transfer that
#: starts as its action ends may read up to this (ns) before the action's end (or a recv end
#: this far after its action's start).
_TOUCH_NS = 2
#: A runtime span this far (ns) before a transfer no longer holds it: stop looking back.
_LOOK_BACK_NS = 60_000_000_000
_NONE = np.iinfo(np.int64).min  #: no value (peer stages may be -1)


def tag_p2p(ops: RankOps, actions: pl.DataFrame) -> pl.DataFrame:
    """The rank's point-to-point instances with what they carry (``TAG_SCHEMA``; unknown
    fields null)."""
    if ops.on_gpu:
        inst = ops.comm_kernels.filter(pl.col("name").is_in(ops.p2p["name"].unique().implode()))
        anchor_col = inst["anchor"]
        src = inst["src_rank"]
        dst = inst["dst_rank"]
    else:
        inst = ops.p2p
        anchor_col = inst["start"]
        src = dst = pl.Series([None] * inst.height, dtype=pl.Int64)
    n = inst.height
    if n == 0:
        return pl.DataFrame(schema=TAG_SCHEMA)
    has_anchor = anchor_col.is_not_null().to_numpy()
    anchors = anchor_col.fill_null(0).cast(pl.Int64).to_numpy()
    names = inst["name"]
    direction = np.full(n, None, dtype=object)
    evidence = np.full(n, None, dtype=object)
    peer_rank = np.full(n, _NONE, dtype=np.int64)
    stage = np.full(n, _NONE, dtype=np.int64)
    peer_stage = np.full(n, _NONE, dtype=np.int64)
    mb = np.full(n, _NONE, dtype=np.int64)
    kind = np.full(n, None, dtype=object)

    # 1. NCCL metadata
    is_src, is_dst = src.is_not_null().to_numpy(), dst.is_not_null().to_numpy()
    srcv, dstv = src.fill_null(0).to_numpy(), dst.fill_null(0).to_numpy()
    recv_meta = is_src
    send_meta = ~is_src & is_dst
    direction[recv_meta], peer_rank[recv_meta] = "recv", srcv[recv_meta]
    direction[send_meta], peer_rank[send_meta] = "send", dstv[send_meta]
    evidence[recv_meta | send_meta] = "nccl metadata"

    # 2. the runtime SEND/RECV span around the anchor
    rt = _runtime_spans(ops)
    hit = _containing(rt["start"].to_numpy(), rt["end"].to_numpy(), anchors, has_anchor)
    tagged = hit >= 0
    if tagged.any():
        idx = hit[tagged]
        t_stage = rt["stage"].to_numpy()[idx]
        t_dir = np.where(rt["dir"].to_numpy()[idx] == "SEND", "send", "recv").astype(object)
        t_kind = rt["kind"].to_numpy()[idx].astype(object)
        delta = np.where(t_kind == "F", np.where(t_dir == "send", 1, -1),
                         np.where(t_dir == "send", -1, 1))
        cur = direction[tagged]
        direction[tagged] = np.where(cur == None, t_dir, cur)  # noqa: E711 (object array)
        stage[tagged], peer_stage[tagged] = t_stage, t_stage + delta
        kind[tagged], mb[tagged] = t_kind, rt["mb"].to_numpy()[idx]
        cur = evidence[tagged]
        evidence[tagged] = np.where(cur == None, "runtime annotation", cur)  # noqa: E711

    # 3a. the direction from the name, else (GPU) from the host op around the launch
    open_dir = direction == None  # noqa: E711
    if open_dir.any():
        low = names.str.to_lowercase()
        has_recv = low.str.contains("recv", literal=True).to_numpy()
        has_send = low.str.contains("send", literal=True).to_numpy()
        by_name = np.where(has_recv & ~has_send, "recv",
                           np.where(has_send & ~has_recv, "send", None)).astype(object)
        direction[open_dir] = by_name[open_dir]
        if ops.on_gpu:
            left = (direction == None) & has_anchor  # noqa: E711
            if left.any():
                direction[left] = _host_direction(ops, anchors[left])

    # 3b. stage, kind and microbatch from the neighbouring action
    need = (kind == None) & (direction != None)  # noqa: E711
    if need.any() and actions.height:
        starts, ends = inst["start"].to_numpy(), inst["end"].to_numpy()
        _from_actions(need & (direction == "recv"), need & (direction == "send"), starts, ends,
                      actions, stage, peer_stage, kind, mb, direction, evidence)

    def ints(a: np.ndarray) -> pl.Series:
        return pl.select(pl.when(pl.lit(pl.Series(a == _NONE))).then(None)
                         .otherwise(pl.lit(pl.Series(a, dtype=pl.Int64)))).to_series()

    return pl.DataFrame({
        "name": names, "start": inst["start"], "end": inst["end"],
        "dir": pl.Series(direction.tolist(), dtype=pl.Utf8),
        "peer_rank": ints(peer_rank), "stage": ints(stage), "peer_stage": ints(peer_stage),
        "kind": pl.Series(kind.tolist(), dtype=pl.Utf8), "microbatch": ints(mb),
        "evidence": pl.Series(evidence.tolist(), dtype=pl.Utf8),
    }, schema=TAG_SCHEMA)


def _runtime_spans(ops: RankOps) -> pl.DataFrame:
    """torch's runtime SEND/RECV spans: start, end, stage, dir (SEND|RECV), kind (F|B), mb;
    sorted by start, then end, then what they carry."""
    spans = ops.spans.filter(pl.col("name").str.starts_with("PP:"))
    parts = spans.select(
        "start", "end", pl.col("name").str.extract_groups(P2P_SPAN_RE.pattern).alias("g"))
    return parts.select(
        "start", "end",
        stage=pl.col("g").struct.field("1").cast(pl.Int64, strict=False),
        dir=pl.col("g").struct.field("2"),
        kind=pl.col("g").struct.field("3"),
        mb=pl.col("g").struct.field("4").cast(pl.Int64, strict=False),
    ).drop_nulls().sort(["start", "end", "stage", "dir", "kind", "mb"])


def _containing(starts: np.ndarray, ends: np.ndarray, t: np.ndarray, valid: np.ndarray,
                rounds: int = 32) -> np.ndarray:
    """Per time in ``t`` (where ``valid``), the index of the innermost (latest-starting) span
    holding it, -1 where none does (spans sorted by start)."""
    out = np.full(t.size, -1, dtype=np.int64)
    if starts.size == 0 or t.size == 0:
        return out
    k = np.searchsorted(starts, t, side="right") - 1
    todo = np.flatnonzero(valid & (k >= 0))
    for _ in range(rounds):
        if todo.size == 0:
            return out
        kk, tt = k[todo], t[todo]
        s, e = starts[kk], ends[kk]
        hit = ((s <= tt) & (tt < e)) | ((s == e) & (e == tt))
        out[todo[hit]] = kk[hit]
        go_on = ~hit & (tt - s <= _LOOK_BACK_NS) & (kk > 0)
        todo = todo[go_on]
        k[todo] -= 1
    for i in todo:  # deep nesting: finish one by one
        j = int(k[i])
        while j >= 0:
            if starts[j] <= t[i] < ends[j] or starts[j] == ends[j] == t[i]:
                out[i] = j
                break
            if t[i] - starts[j] > _LOOK_BACK_NS:
                break
            j -= 1
    return out


def _host_direction(ops: RankOps, anchors: np.ndarray) -> np.ndarray:
    """send/recv of the top-level host P2P op running at each launch time (None: none)."""
    host = ops.cpu_ops.filter(pl.col("p2p")).sort("start", maintain_order=True)
    out = np.full(anchors.size, None, dtype=object)
    if host.height == 0:
        return out
    starts, ends = host["start"].to_numpy(), host["end"].to_numpy()
    k = np.searchsorted(starts, anchors, side="right") - 1
    inside = (k >= 0) & (anchors < ends[np.maximum(k, 0)])
    op = host["name"]
    word = np.where(op.str.contains("send", literal=True).to_numpy(), "send",
                    np.where(op.str.contains("recv", literal=True).to_numpy(), "recv", None))
    out[inside] = word[k[inside]]
    return out


def _from_actions(recv: np.ndarray, send: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                  actions: pl.DataFrame, stage, peer_stage, kind, mb, direction, evidence) -> None:
    """Stage, kind and microbatch from the action a transfer feeds (a recv: the first whose
    compute starts at or after the recv's end) or carries (a send: the last whose compute
    ended by the send's start); fills the arrays in place."""
    a_stage = actions["stage"].to_numpy()
    a_back = (actions["kind"] != "F").to_numpy()
    a_mb = actions["microbatch"].to_numpy()
    picks = []
    if recv.any():
        cs = actions["compute_start"].to_numpy()
        order = np.argsort(cs, kind="stable")
        j = np.searchsorted(cs[order], ends[recv] - _TOUCH_NS, side="left")
        ok = j < order.size
        rows = np.flatnonzero(recv)[ok]
        picks.append((rows, order[j[ok]]))
    if send.any():
        ce = actions["compute_end"].to_numpy()
        order = np.argsort(ce, kind="stable")
        j = np.searchsorted(ce[order], starts[send] + _TOUCH_NS, side="right") - 1
        ok = j >= 0
        rows = np.flatnonzero(send)[ok]
        picks.append((rows, order[j[ok]]))
    for rows, a in picks:
        back = a_back[a]
        is_send = direction[rows] == "send"
        delta = np.where(back, np.where(is_send, -1, 1), np.where(is_send, 1, -1))
        stage[rows] = a_stage[a]
        peer_stage[rows] = a_stage[a] + delta
        kind[rows] = np.where(back, "B", "F")
        mb[rows] = a_mb[a]
        cur = evidence[rows]
        evidence[rows] = np.where(cur == None, "neighbouring action", cur)  # noqa: E711
