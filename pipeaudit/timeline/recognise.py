"""Recognise pipeline actions from annotation spans.

Sources, in order of preference on each rank:

1. torch runtime annotations ``PP:<stage><F|B|I|W><mb>`` and
   ``PP:(<sub>;<sub>)OVERLAP_F_B`` (split into its sub-actions at the first
   autograd op inside it). SEND/RECV/UNSHARD/RESHARD/REDUCE_GRAD spans are not
   actions.
2. a user pattern (``--action-pattern``): a regex with named groups ``kind`` and
   ``mb`` (or ``microbatch``) and optionally ``stage``.
3. ``ScheduleGPipe``'s ``Forward <mb>`` / ``Backward <mb>``.

The result is a table of action spans: ``stage, kind, microbatch, tid, start,
end, source`` and the span's own ``name`` and ``external_id`` (to find its GPU copy).
When nothing matches, :mod:`pipeaudit.timeline.infer` takes over.
"""

from __future__ import annotations

import re

import numpy as np
import polars as pl

from pipeaudit.errors import ConfigError
from pipeaudit.timeline.ops import RankOps

PP_ACTION_RE = r"^PP:(\d+)([FBIW])(\d+)$"
PP_OVERLAP_RE = r"^PP:\((.*)\)OVERLAP_F_B$"
#: The ops torch runs before a backward's first autograd op: the loss gradient's seed and the
#: views of the gradients handed to the engine.
GRADIENT_PREP_OPS = ("aten::ones_like", "aten::view_as")
GPIPE_RE = r"^(Forward|Backward) (\d+)$"

#: Stage and microbatch numbers at or above this are not pipeline actions (a name such as
#: ``PP:99999999999999999999F0`` is garbage, and a huge microbatch number would make the
#: audit build schedules of that many microbatches).
MAX_INDEX = 10_000

SPAN_SCHEMA = {
    "stage": pl.Int64,
    "kind": pl.Utf8,
    "microbatch": pl.Int64,
    "tid": pl.Utf8,
    "start": pl.Int64,
    "end": pl.Int64,
    "source": pl.Utf8,
    "name": pl.Utf8,
    "external_id": pl.Int64,
}

#: Kind words of user spans (``--action-pattern``'s kind group, detected span families).
KIND_WORDS = {
    "f": "F", "fwd": "F", "forward": "F",
    "b": "B", "bwd": "B", "backward": "B",
    "i": "I", "dgrad": "I", "input": "I", "backward_input": "I",
    "w": "W", "wgrad": "W", "weight": "W", "backward_weight": "W",
}


def _drop_nested_duplicates(spans: pl.DataFrame) -> pl.DataFrame:
    """Keep the outermost of identical action spans nested in each other."""
    if spans.height == 0:
        return spans
    spans = spans.sort(["stage", "kind", "microbatch", "tid", "start", "end"],
                       descending=[False, False, False, False, False, True])
    prev_end = pl.col("end").cum_max().shift(1).over(["stage", "kind", "microbatch", "tid"])
    return spans.filter(prev_end.is_null() | (pl.col("start") >= prev_end))


def torch_runtime_spans(ops: RankOps) -> pl.DataFrame:
    """Action spans from ``PP:`` annotations, OVERLAP_F_B split into sub-actions."""
    s = ops.spans.filter(pl.col("name").str.starts_with("PP:"))  # a cheap pass before the regexes
    plain = s.filter(pl.col("name").str.contains(PP_ACTION_RE)).select(
        stage=pl.col("name").str.extract(PP_ACTION_RE, 1).cast(pl.Int64, strict=False),
        kind=pl.col("name").str.extract(PP_ACTION_RE, 2),
        microbatch=pl.col("name").str.extract(PP_ACTION_RE, 3).cast(pl.Int64, strict=False),
        tid="tid", start="start", end="end", source=pl.lit("annotation"), name="name",
        external_id="external_id",
    ).filter(_valid_indices())
    overlap = s.filter(pl.col("name").str.contains(PP_OVERLAP_RE))
    parts = [plain]
    if overlap.height:
        parts.append(_split_overlap(overlap, ops))
    return _drop_nested_duplicates(pl.concat(parts)).sort("start")


def _split_overlap(overlap: pl.DataFrame, ops: RankOps) -> pl.DataFrame:
    """Split each OVERLAP_F_B span into its sub-actions.

    torch runs the sub-actions one after another inside the span; the forward
    part ends where the backward part starts: its first autograd op, or the seed and views
    of the gradient right before it (``ones_like``, ``view_as``: what torch's own I and B
    spans begin with).
    """
    bwd = ops.cpu_ops.filter(pl.col("backward")).sort("start")
    bwd_starts = bwd["start"].to_numpy()
    top = ops.cpu_ops.filter(~pl.col("backward")).sort("start")
    top_starts, top_ends = top["start"].to_numpy(), top["end"].to_numpy()
    top_tids = top["tid"].to_list()
    glue = top["name"].is_in(list(GRADIENT_PREP_OPS)).to_numpy()
    rows = []
    for name, tid, start, end, ext in overlap.select("name", "tid", "start", "end",
                                                      "external_id").iter_rows():
        subs = re.match(PP_OVERLAP_RE, name).group(1).split(";")  # type: ignore[union-attr]
        acts = []
        for sub in subs:
            m = re.match(r"^(\d+)([FBIW])(\d+)$", sub.strip())
            if m and int(m.group(1)) < MAX_INDEX and int(m.group(3)) < MAX_INDEX:
                acts.append((int(m.group(1)), m.group(2), int(m.group(3))))
        if not acts:
            continue
        i = int(np.searchsorted(bwd_starts, start, side="left"))
        split = int(bwd_starts[i]) if i < bwd_starts.size and bwd_starts[i] < end else end
        if split < end:  # the gradient's seed and views before the first autograd op
            k = int(np.searchsorted(top_starts, split, side="left")) - 1
            while k >= 0 and top_starts[k] >= start and glue[k] and top_tids[k] == tid \
                    and top_ends[k] <= split:
                split = int(top_starts[k])
                k -= 1
        bounds = _sub_bounds(acts, start, end, split)
        for (stage, kind, mb), (a, b) in zip(acts, bounds):
            rows.append((stage, kind, mb, tid, a, b, "annotation", name, ext))
    return pl.DataFrame(rows, schema=SPAN_SCHEMA, orient="row")


def _sub_bounds(acts, start: int, end: int, split: int) -> list[tuple[int, int]]:
    """Time bounds of each sub-action: forwards before ``split``, backwards after."""
    fwd = [k == "F" for _, k, _ in acts]
    if all(fwd) or not any(fwd):
        step = (end - start) // len(acts)
        return [(start + i * step, end if i == len(acts) - 1 else start + (i + 1) * step)
                for i in range(len(acts))]
    return [(start, split) if f else (split, end) for f in fwd]


def pattern_spans(ops: RankOps, pattern: str, default_stage: int) -> pl.DataFrame:
    """Action spans from a user regex with named groups ``kind``, ``mb``/``microbatch``, ``stage``."""
    try:
        rx = re.compile(pattern)
    except re.error as exc:
        raise ConfigError(f"--action-pattern {pattern!r} is not a valid regex: {exc}") from None
    groups = set(rx.groupindex)
    mb_group = "mb" if "mb" in groups else "microbatch" if "microbatch" in groups else None
    if "kind" not in groups or mb_group is None:
        raise ConfigError(
            f"--action-pattern {pattern!r} needs named groups (?P<kind>...) and (?P<mb>...); "
            "(?P<stage>...) is optional"
        )
    rows = []
    for name, tid, start, end, ext in ops.spans.select("name", "tid", "start", "end",
                                                        "external_id").iter_rows():
        m = rx.search(name)
        if m is None:
            continue
        kind = KIND_WORDS.get((m.group("kind") or "").lower())
        if kind is None:
            continue
        stage_text = m.group("stage") if "stage" in groups else None
        stage = _pattern_int(pattern, "stage", stage_text, name) if stage_text else default_stage
        mb = _pattern_int(pattern, mb_group, m.group(mb_group), name)
        if stage < MAX_INDEX and mb < MAX_INDEX:
            rows.append((stage, kind, mb, tid, start, end, "pattern", name, ext))
    spans = pl.DataFrame(rows, schema=SPAN_SCHEMA, orient="row")
    return _drop_nested_duplicates(spans).sort("start")


def gpipe_spans(ops: RankOps, default_stage: int) -> pl.DataFrame:
    """Action spans from ``Forward <mb>`` / ``Backward <mb>`` (torch ScheduleGPipe)."""
    s = ops.spans.filter(pl.col("name").str.starts_with("Forward ")
                         | pl.col("name").str.starts_with("Backward "))  # before the regex
    s = s.filter(pl.col("name").str.contains(GPIPE_RE))
    spans = s.select(
        stage=pl.lit(default_stage, dtype=pl.Int64),
        kind=pl.col("name").str.extract(GPIPE_RE, 1).str.slice(0, 1),
        microbatch=pl.col("name").str.extract(GPIPE_RE, 2).cast(pl.Int64, strict=False),
        tid="tid", start="start", end="end", source=pl.lit("annotation"), name="name",
        external_id="external_id",
    ).filter(_valid_indices())
    return _with_loss(_drop_nested_duplicates(spans).sort("start"), ops)


def _with_loss(spans: pl.DataFrame, ops: RankOps) -> pl.DataFrame:
    """``Forward <mb>`` spans extended over the compute that follows them on their thread up to
    the next action span or communication op: ``ScheduleGPipe`` computes the last stage's loss
    just after the span (``_maybe_compute_loss``), and the loss is the forward's
    (docs/metrics.md, "What an action holds"); on other stages nothing follows."""
    if spans.height == 0:
        return spans
    ends = spans["end"].to_numpy().copy()
    starts = spans["start"].to_numpy()
    is_fwd = (spans["kind"] == "F").to_numpy()
    tids = spans["tid"].to_list()
    for tid in set(tids):
        top = ops.cpu_ops.filter(pl.col("tid") == tid).sort("start")
        o_start, o_end = top["start"].to_numpy(), top["end"].to_numpy()
        o_comm = top["comm"].to_numpy()
        rows = [i for i, t in enumerate(tids) if t == tid]
        for j, i in enumerate(rows):
            if not is_fwd[i]:
                continue
            limit = starts[rows[j + 1]] if j + 1 < len(rows) else np.iinfo(np.int64).max
            k = int(np.searchsorted(o_start, ends[i], side="left"))
            end = ends[i]
            while k < o_start.size and o_start[k] < limit and not o_comm[k]:
                end = max(end, min(int(o_end[k]), int(limit)))
                k += 1
            ends[i] = end
    return spans.with_columns(end=pl.Series(ends, dtype=pl.Int64))


def _valid_indices() -> pl.Expr:
    """Stage and microbatch parsed (they fit Int64) and below :data:`MAX_INDEX`."""
    return (pl.col("stage").is_not_null() & pl.col("microbatch").is_not_null()
            & (pl.col("stage") < MAX_INDEX) & (pl.col("microbatch") < MAX_INDEX))


def _pattern_int(pattern: str, group: str, text: str | None, name: str) -> int:
    """The integer a ``--action-pattern`` group matched; ConfigError when it is not one."""
    try:
        value = int(text or "")
    except ValueError:
        raise ConfigError(
            f"--action-pattern {pattern!r}: group {group} matched {text!r} in the span {name[:60]!r}, "
            "which is not an integer; make the group match digits only, e.g. (?P<mb>\\d+)"
        ) from None
    if value < 0:
        raise ConfigError(f"--action-pattern {pattern!r}: group {group} matched a negative number "
                          f"{text!r} in the span {name[:60]!r}")
    return value
