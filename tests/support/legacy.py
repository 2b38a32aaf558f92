"""The implementations that the columnar ones replaced, kept verbatim (imports aside) as the
reference for ``tests/test_columnar_equivalence.py``: old and new must give the same answer on
built and sample runs. Not used by pipeaudit itself."""

from __future__ import annotations

import numpy as np
import polars as pl

from pipeaudit.timeline.ops import RankOps
from pipeaudit.timeline.p2p_tags import P2P_SPAN_RE, PEER_DELTA, TAG_SCHEMA


# ------------------------------------------------------------- timeline/p2p_tags.py: tag_p2p
def tag_p2p(ops: RankOps, actions: pl.DataFrame) -> pl.DataFrame:
    """The rank's point-to-point instances with what they carry (``TAG_SCHEMA``; unknown
    fields null)."""
    if ops.on_gpu:
        inst = ops.comm_kernels.filter(pl.col("name").is_in(ops.p2p["name"].unique().implode()))
        anchors = inst["anchor"].to_numpy() if inst.height else np.zeros(0, dtype=np.int64)
        src = inst["src_rank"].to_list()
        dst = inst["dst_rank"].to_list()
    else:
        inst = ops.p2p
        anchors = inst["start"].to_numpy()
        src = dst = [None] * inst.height
    names = inst["name"].to_list()
    starts = inst["start"].to_list()
    ends = inst["end"].to_list()
    runtime = _runtime_spans(ops)
    host_ops = ops.cpu_ops.filter(pl.col("p2p")).sort("start")
    rows = []
    for i in range(inst.height):
        row = dict(name=names[i], start=starts[i], end=ends[i], dir=None, peer_rank=None,
                   stage=None, peer_stage=None, kind=None, microbatch=None, evidence=None)
        if src[i] is not None:
            row.update(dir="recv", peer_rank=int(src[i]), evidence="nccl metadata")
        elif dst[i] is not None:
            row.update(dir="send", peer_rank=int(dst[i]), evidence="nccl metadata")
        anchor = anchors[i]
        tag = _containing(runtime, anchor) if anchor is not None and not _isnan(anchor) else None
        if tag is not None:
            stage, direction, kind, mb = tag
            d = "send" if direction == "SEND" else "recv"
            peer = stage + PEER_DELTA[(d, kind)]
            row.update(dir=row["dir"] or d, stage=stage, peer_stage=peer, kind=kind, microbatch=mb,
                       evidence=row["evidence"] or "runtime annotation")
        if row["dir"] is None:
            row["dir"] = _direction(names[i], host_ops, anchor if ops.on_gpu else None)
        if row["kind"] is None and row["dir"] is not None:
            _from_actions(row, actions)
        rows.append(row)
    return pl.DataFrame(rows, schema=TAG_SCHEMA, orient="row") if rows else pl.DataFrame(schema=TAG_SCHEMA)


def _isnan(x) -> bool:
    return isinstance(x, float) and x != x


def _runtime_spans(ops: RankOps) -> list[tuple[int, int, tuple]]:
    """(start, end, (stage, SEND|RECV, F|B, mb)) of torch's runtime SEND/RECV spans, by start."""
    out = []
    for name, start, end in ops.spans.filter(pl.col("name").str.starts_with("PP:")).select(
            "name", "start", "end").iter_rows():
        m = P2P_SPAN_RE.match(name)
        if m:
            out.append((int(start), int(end), (int(m.group(1)), m.group(2), m.group(3), int(m.group(4)))))
    out.sort()
    return out


def _containing(spans: list[tuple[int, int, tuple]], t: int) -> tuple | None:
    """The innermost (latest-starting) span that holds time ``t``."""
    starts = [s for s, _, _ in spans]
    k = int(np.searchsorted(starts, t, side="right")) - 1
    while k >= 0:
        s, e, tag = spans[k]
        if s <= t < e or (s == e == t):
            return tag
        if t - s > 60_000_000_000:  # spans are short; stop looking far back
            return None
        k -= 1
    return None


def _direction(name: str, host_ops: pl.DataFrame, anchor) -> str | None:
    """send/recv from the instance's name, else (GPU) from the host op around its launch."""
    low = name.lower()
    if "recv" in low and "send" not in low:
        return "recv"
    if "send" in low and "recv" not in low:
        return "send"
    if anchor is None or host_ops.height == 0:
        return None
    starts = host_ops["start"].to_numpy()
    k = int(np.searchsorted(starts, anchor, side="right")) - 1
    if k < 0 or anchor >= host_ops["end"][k]:
        return None
    op = host_ops["name"][k]
    return "send" if "send" in op else "recv" if "recv" in op else None


def _from_actions(row: dict, actions: pl.DataFrame) -> None:
    """Stage, kind and microbatch from the action the transfer feeds (recv) or carries (send)."""
    if actions.height == 0:
        return
    if row["dir"] == "recv":
        later = actions.filter(pl.col("compute_start") >= row["end"])
        if later.height == 0:
            return
        a = later.sort("compute_start").row(0, named=True)
    else:
        earlier = actions.filter(pl.col("compute_end") <= row["start"])
        if earlier.height == 0:
            return
        a = earlier.sort("compute_end").row(-1, named=True)
    kind = "F" if a["kind"] == "F" else "B"
    row.update(stage=a["stage"], peer_stage=a["stage"] + PEER_DELTA[(row["dir"], kind)], kind=kind,
               microbatch=a["microbatch"], evidence=row["evidence"] or "neighbouring action")
