"""Reduce one rank's trace to its compact pipeline timeline.

This is the per-rank half of the analysis: it needs only that rank's events,
so it runs in a worker process next to the decode, and what it returns (action
table, compute intervals, communication and activity sets, step spans, memory
peaks) is small whatever the size of the trace.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np
import polars as pl

from pipeaudit.timeline import intervals as iv
from pipeaudit.timeline.attribute import COMPUTE_SCHEMA, attribute, pair_gpu_copies
from pipeaudit.timeline.recv_facts import RecvFacts
from pipeaudit.timeline.infer import SPLIT_OP, infer_actions, pipeline_thread
from pipeaudit.timeline.ops import classify
from pipeaudit.timeline.packed import PackedFrame, PackedIntervals, PackedSpans
from pipeaudit.timeline.p2p_tags import KEPT_SCHEMA, kept_form, tag_p2p
from pipeaudit.timeline.recognise import (
    SPAN_SCHEMA,
    gpipe_spans,
    pattern_spans,
    torch_runtime_spans,
)
from pipeaudit.timeline.steps import assign_steps, number_by_order, step_windows
from pipeaudit.timeline.span_families import family_of_spans

#: ``start``/``end``: where the action ran (CPU traces: its span; GPU traces: on the device,
#: its kernels and GPU copy); ``host_start``/``host_end``: its span on the host (on GPU
#: traces, when the CPU issued it).
ACTION_COLUMNS = [
    "rank", "stage", "kind", "microbatch", "step", "profiler_step", "tid", "start", "end",
    "compute_ns", "compute_start", "compute_end", "source", "host_start", "host_end",
]


@dataclass(frozen=True)
class RankTotals:
    """Whole-trace figures of one rank (ns), which a clock shift does not change: computed
    where the rank is reduced (in its worker), read by the audit."""

    comm_ns: int  #: communication time (the union of the comm intervals)
    exposed_comm_ns: int  #: ... not overlapped by compute (in actions or not)
    busy_ns: int  #: the union of all activity
    span_ns: int  #: first to last activity
    other_compute_ns: int  #: compute outside every action

    @classmethod
    def of(cls, rt: "RankTimeline") -> "RankTotals":
        compute = rt.compute
        compute_all = iv.union(iv.merge(compute["start"].to_numpy(), compute["end"].to_numpy()),
                               rt.other_compute)
        first, last = (rt.activity[0][0], rt.activity[1][-1]) if rt.activity[0].size else (0, 0)
        return cls(comm_ns=iv.total(rt.comm),
                   exposed_comm_ns=iv.total(iv.subtract(rt.comm, compute_all)),
                   busy_ns=iv.total(rt.activity), span_ns=int(last - first),
                   other_compute_ns=iv.total(rt.other_compute))


@dataclass
class RankTimeline:
    """One rank's pipeline actions and activity, on the common ns clock."""

    rank: int
    path: str
    device_type: str
    on_gpu: bool
    world_size: int | None
    actions: pl.DataFrame  # ACTION_COLUMNS, sorted by start; row index = action id within the rank
    #: action, start, end: merged compute intervals per action. Held packed
    #: (:class:`~pipeaudit.timeline.packed.PackedIntervals`, in :attr:`compute_packed`):
    #: reading it unpacks a new frame, assigning a frame packs it
    compute: pl.DataFrame
    comm: iv.Intervals
    #: all activity; once reduced (:func:`reduce_rank`) only its bounds, one interval from the
    #: first activity to the last: the busy time is in :attr:`totals`
    activity: iv.Intervals
    other_compute: iv.Intervals  # compute outside every action (optimizer, data loading, ...)
    steps: pl.DataFrame  # step windows: profiler_step (null for optimizer windows), start, end
    memory_peak: dict[int, int]  # device id -> max Total Allocated
    memory: pl.DataFrame  # ts, total_allocated, device_id
    source: str  # annotation | pattern | inferred | none
    outside_steps: int = 0
    warnings: list[str] = field(default_factory=list)
    #: what the step windows came from (steps.PROFILER_EVIDENCE, OPTIMIZER_EVIDENCE), or None
    step_evidence: str | None = None
    #: host times at which the schedule split a batch into microbatches (first/last stage)
    split_marks: list[int] = field(default_factory=list)
    #: True when the stage column was not in the trace (inferred actions, GPipe's
    #: ``Forward i``, a pattern without a stage group): the rank's place in its pipeline
    #: replaces it once the layout is known
    stage_from_rank: bool = False
    #: inferred actions: share of the pipeline thread's compute inside an action
    coverage: float | None = None
    #: collective instances (data-parallel gradient sync, tensor-parallel all-reduces, ...):
    #: name, start, end
    collectives: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(
        schema={"name": pl.Utf8, "start": pl.Int64, "end": pl.Int64}))
    #: point-to-point instances, merged (the audit reads only the time they cover; the
    #: instances themselves are :attr:`p2p_tags` until the transfers are settled)
    p2p: iv.Intervals = field(default_factory=iv.empty)
    #: what each point-to-point instance carries (p2p_tags.KEPT_SCHEMA); emptied
    #: once the job's transfers are matched (:func:`pipeaudit.timeline.build.build_timeline`):
    #: the recvs keep what the audit reads. Held packed
    #: (:class:`~pipeaudit.timeline.packed.PackedFrame`, in :attr:`p2p_tags_packed`; its
    #: ``rows`` is the height): reading it unpacks a new frame, assigning a frame packs it
    p2p_tags: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=KEPT_SCHEMA))
    #: what the audit reads of the rank's recvs, each split into waiting for the sender and
    #: transfer (:class:`~pipeaudit.timeline.recv_facts.RecvFacts`; set across ranks by
    #: :func:`pipeaudit.timeline.p2p.split_recvs`, None before)
    recv_summary: RecvFacts | None = None
    #: the trace's host name (clocks of different hosts are aligned across ranks)
    host: str | None = None
    #: GPU traces whose kernels run on several devices (a single-process pipeline): compute
    #: per action and device (action, device, start, end), and all GPU activity per device
    device_compute: pl.DataFrame | None = None
    device_activity: dict[int, iv.Intervals] | None = None
    #: whole-trace figures (:class:`RankTotals`), set by :func:`reduce_rank`; None: not yet
    totals_cache: RankTotals | None = None
    #: CPU traces: the starts of the rank's ``c10d::send``/``isend`` ops, sorted. gloo's
    #: lifetime span of a send (the send's instance) can start milliseconds after its op did,
    #: when the data was already on its way; who-sends-to-whom (:mod:`pipeaudit.timeline.peers`)
    #: needs the op's start. Dropped once the layout is known
    send_op_starts: np.ndarray | None = None
    #: inferred ranks only: the other reading of a backward block that is one op sequence
    #: repeated (k backwards, or one backward of a stage whose layers repeat), reduced the same
    #: way; the job keeps the reading whose forwards per step agree with the other ranks'
    alternative: "RankTimeline | None" = None
    #: inferred ranks only: the reading of a split backward (engine calls grouped into
    #: actions, one or two per forward: :mod:`pipeaudit.timeline.split_backward`), where it
    #: differs from the plain one; the job keeps it when some rank's plain reading runs other
    #: than one backward per forward
    split_reading: "RankTimeline | None" = None
    #: inferred ranks only: why its reading is a guess between rival readings of its ops
    #: ("" where it is not; :attr:`pipeaudit.timeline.infer.Inferred.doubt`)
    inferred_doubt: str = ""
    #: inferred ranks only: where the schedule thread's compute went
    #: (:class:`~pipeaudit.timeline.conservation.OpAccount`), settled once steps are known
    account: Any = None

    def shift_packed(self, delta_ns: int) -> None:
        """Move the packed times, the compute intervals and the interval sets
        (:data:`PACKED_SPANS`), ``delta_ns`` later without unpacking them."""
        self.compute_packed = self.compute_packed.shifted(delta_ns)
        for name in PACKED_SPANS:
            packed = f"{name}_packed"
            setattr(self, packed, getattr(self, packed).shifted(delta_ns))

    @property
    def totals(self) -> RankTotals:
        """:class:`RankTotals` of this rank (computed once)."""
        if self.totals_cache is None:
            self.totals_cache = RankTotals.of(self)
        return self.totals_cache


#: The interval sets a rank holds packed (:class:`PackedSpans`, in ``<name>_packed``).
PACKED_SPANS = ("comm", "other_compute", "p2p")


@cache
def no_tags() -> PackedFrame:
    """The packed empty table of tags (shared by every rank whose tags are settled)."""
    return PackedFrame.of(pl.DataFrame(schema=KEPT_SCHEMA))


def _stored_packed(name: str, pack: Callable[[Any], Any], unpack: Callable[[Any], Any]) -> property:
    """Field ``name`` held as ``pack(value)`` in ``<name>_packed``; each read is
    ``unpack(packed)``, a new value."""
    packed = f"{name}_packed"

    def get(self: RankTimeline) -> Any:
        return unpack(getattr(self, packed))

    def set_(self: RankTimeline, value: Any) -> None:
        setattr(self, packed, pack(value))

    return property(get, set_, doc=f"``{name}``, unpacked from ``{packed}`` at each read")


# ``compute``, ``p2p_tags`` and the interval sets are dataclass fields (the constructor,
# ``dataclasses.replace`` and ``==`` take them as frames and arrays) stored packed: a parent
# process holds one of each per rank until the settling of the transfers (tags) or the audit
# (the rest)
RankTimeline.compute = _stored_packed("compute", PackedIntervals.of, PackedIntervals.frame)  # type: ignore[assignment]
RankTimeline.p2p_tags = _stored_packed("p2p_tags", PackedFrame.of, PackedFrame.frame)  # type: ignore[assignment]
for _name in PACKED_SPANS:
    setattr(RankTimeline, _name, _stored_packed(_name, PackedSpans.of, PackedSpans.spans))


def reduce_rank(trace, *, stage_hint: int | None = None, pattern: str | None = None) -> RankTimeline:
    """Recognise actions, attribute compute and assign steps for one :class:`RankTrace`."""
    ops = classify(trace.rank, trace.events)
    default_stage = trace.rank if stage_hint is None else stage_hint
    steps, step_evidence = step_windows(ops.spans)

    spans, source, stage_from_rank, coverage = pl.DataFrame(schema=SPAN_SCHEMA), "none", False, None
    detected_note = None
    if pattern:
        spans, source = pattern_spans(ops, pattern, default_stage), "pattern"
        stage_from_rank = "(?P<stage>" not in pattern
    if spans.height == 0:
        spans, source, stage_from_rank = torch_runtime_spans(ops), "annotation", False
    if spans.height == 0:
        spans, source, stage_from_rank = gpipe_spans(ops, default_stage), "annotation", True
    if spans.height == 0:
        family = family_of_spans(ops.spans)
        if family is not None:
            spans, source = pattern_spans(ops, family.pattern, default_stage), "pattern"
            stage_from_rank = "(?P<stage>" not in family.pattern
            detected_note = (f"rank {trace.rank}: actions from spans named like {family.shown} "
                             "(detected; --action-pattern overrides)")
    alternative, account = None, None
    if spans.height == 0:
        inferred = infer_actions(ops, default_stage)
        spans, source, coverage = inferred.spans, "inferred", inferred.coverage
        account = inferred.account()
        stage_from_rank = stage_hint is None  # the layout places the rank
        if inferred.split:  # the other reading, for the job to choose (build.consistent_counts)
            other = infer_actions(ops, default_stage, split=False)
            alternative = _finish(trace, ops, steps, step_evidence, other.spans, "inferred",
                                  stage_from_rank, other.coverage, None)
    if spans.height == 0:
        source, stage_from_rank = "none", False
    rt = _finish(trace, ops, steps, step_evidence, spans, source, stage_from_rank, coverage,
                 detected_note)
    rt.alternative = alternative
    if source == "inferred":
        rt.account = account
        if alternative is not None:
            alternative.account = other.account()
        rt.split_reading = _split_reading(trace, ops, steps, step_evidence, default_stage,
                                          stage_from_rank, spans)
    return rt


def _split_reading(trace, ops, steps, step_evidence, stage: int, stage_from_rank: bool,
                   plain: pl.DataFrame) -> RankTimeline | None:
    """The rank's reading of a split backward, where it differs from the plain reading
    ``plain``; None when it does not or finds no forward signature."""
    calls = infer_actions(ops, stage, calls=True)
    if calls.spans.height == 0 or calls.spans.select("kind", "start", "end").equals(
            plain.sort("start").select("kind", "start", "end")):
        return None
    split = _finish(trace, ops, steps, step_evidence, calls.spans, "inferred", stage_from_rank,
                    calls.coverage, None)
    split.account = calls.account()
    split.inferred_doubt = calls.doubt
    return split


def _finish(trace, ops, steps, step_evidence, spans, source, stage_from_rank, coverage,
            detected_note) -> RankTimeline:
    """The rank's timeline from its action spans: compute attributed, steps assigned."""
    spans = spans.sort("start")

    copies = pair_gpu_copies(spans, ops.gpu_spans) if ops.on_gpu else None
    compute = attribute(spans, ops, copies) if spans.height else pl.DataFrame(schema=COMPUTE_SCHEMA)
    multi_device = ops.on_gpu and ops.units["device"].n_unique() > 1 and spans.height > 0
    device_compute = attribute(spans, ops, copies, by_device=True) if multi_device else None
    per_action = compute.group_by("action").agg(
        compute_ns=(pl.col("end") - pl.col("start")).sum(),
        compute_start=pl.col("start").min(),
        compute_end=pl.col("end").max(),
    )
    actions = (
        spans.with_row_index("action").with_columns(pl.col("action").cast(pl.Int64))
        .join(per_action, on="action", how="left")
        .with_columns(
            pl.col("compute_ns").fill_null(0),
            pl.col("compute_start").fill_null(pl.col("start")),
            pl.col("compute_end").fill_null(pl.col("start")),
            rank=pl.lit(trace.rank, dtype=pl.Int64),
            host_start=pl.col("start"), host_end=pl.col("end"),
        )
    )
    if ops.on_gpu:
        actions = _device_spans(actions, copies)
    actions, outside = assign_steps(actions, steps, at="host_start")
    if source == "inferred":
        actions = number_by_order(actions)
    # renumber action ids to the kept rows so compute.action indexes actions
    keep_ids = actions["action"]
    compute = compute.filter(pl.col("action").is_in(keep_ids.implode()))
    remap = dict(zip(keep_ids.to_list(), range(actions.height)))
    compute = compute.with_columns(pl.col("action").replace_strict(remap, return_dtype=pl.Int64)) \
        if compute.height else compute
    if device_compute is not None:
        device_compute = device_compute.filter(pl.col("action").is_in(keep_ids.implode()))
        device_compute = device_compute.with_columns(
            pl.col("action").replace_strict(remap, return_dtype=pl.Int64))
    actions = actions.select(ACTION_COLUMNS)

    action_compute = iv.merge(compute["start"].to_numpy(), compute["end"].to_numpy())
    all_compute = iv.merge(ops.units["start"].to_numpy(), ops.units["end"].to_numpy())
    other = iv.subtract(all_compute, action_compute)

    mem = getattr(trace, "memory", None)
    if mem is None or mem.height == 0:
        memory = pl.DataFrame(schema={"ts": pl.Int64, "total_allocated": pl.Int64, "device_id": pl.Int64})
        peaks: dict[int, int] = {}
    else:
        memory = mem.select(
            pl.col("ts").cast(pl.Int64),
            pl.col("total_allocated").cast(pl.Int64),
            pl.col("device_id").cast(pl.Int64).fill_null(-1),
        )
        peaks = {int(d): int(v) for d, v in memory.group_by("device_id").agg(
            pl.col("total_allocated").max()).iter_rows() if v is not None}  # no usable sample: no peak

    warnings: list[str] = []  # the trace's own warnings travel in TraceSet.warnings
    if detected_note and spans.height:
        warnings.append(detected_note)
    if outside:
        warnings.append(f"rank {trace.rank}: {outside} actions outside every step window "
                        f"({step_evidence}) were ignored")
    rt = RankTimeline(
        rank=trace.rank, path=str(trace.path), device_type=trace.device_type, on_gpu=ops.on_gpu,
        world_size=trace.world_size, actions=actions, compute=compute, comm=ops.comm,
        activity=ops.activity, other_compute=other, steps=steps, memory_peak=peaks,
        memory=memory, source=source, outside_steps=outside, warnings=warnings,
        step_evidence=step_evidence, split_marks=_split_marks(ops, actions),
        stage_from_rank=stage_from_rank, coverage=coverage,
        collectives=ops.collectives,
        p2p=iv.merge(ops.p2p["start"].to_numpy(), ops.p2p["end"].to_numpy()),
        p2p_tags=kept_form(tag_p2p(ops, actions)),
        host=getattr(trace, "host", None), device_compute=device_compute,
        send_op_starts=None if ops.on_gpu else np.sort(ops.cpu_ops.filter(
            pl.col("p2p") & pl.col("send") & pl.col("name").str.starts_with("c10d::"))["start"]
            .to_numpy()),
        device_activity=ops.device_activity if multi_device else None,
    )
    rt.totals_cache = RankTotals.of(rt)  # here, in the rank's worker
    rt.activity = activity_bounds(rt.activity)  # the parent keeps every rank: keep it small
    for name in ("actions", "collectives"):  # the tags are packed: no views left to own
        setattr(rt, name, own_strings(getattr(rt, name)))
    return rt


def activity_bounds(activity: iv.Intervals) -> iv.Intervals:
    """One interval from the first activity to the last (empty when there is none)."""
    if activity[0].size == 0:
        return iv.empty()
    return (activity[0][:1].copy(), activity[1][-1:].copy())


def own_strings(df: pl.DataFrame) -> pl.DataFrame:
    """``df`` with its string columns copied into buffers of their own.

    A string column filtered out of a rank's decoded events still points into that rank's
    whole string buffers (polars stores strings as views into shared buffers), so a table of
    200 transfers kept for the run would hold megabytes of event names alive: 0.3 MB per
    rank of a 6 MB trace, measured. Appending the empty string writes every value anew."""
    strings = [c for c, t in df.schema.items() if t == pl.Utf8]
    return df.with_columns([pl.col(c) + "" for c in strings]) if strings and df.height else df


def _split_marks(ops, actions: pl.DataFrame) -> list[int]:
    """Host times of the schedule's batch splits: top-level ``aten::tensor_split`` on the
    pipeline thread outside every action (torch.distributed.pipelining splits the batch into
    microbatches at the start of each ``schedule.step()``, on the first and last stage)."""
    tid = pipeline_thread(ops)
    if tid is None:
        return []
    splits = ops.cpu_ops.filter((pl.col("tid") == tid) & (pl.col("name") == SPLIT_OP))["start"].to_numpy()
    if splits.size == 0 or actions.height == 0:
        return [int(t) for t in splits]
    a = actions.sort("host_start")
    lo, hi = a["host_start"].to_numpy(), a["host_end"].to_numpy()
    k = np.searchsorted(lo, splits, side="right") - 1
    inside = (k >= 0) & (splits < hi[np.maximum(k, 0)])
    return [int(t) for t in splits[~inside]]


def _device_spans(actions: pl.DataFrame, copies: pl.DataFrame | None) -> pl.DataFrame:
    """GPU traces: an action's ``start``/``end`` become its span on the device (its kernels and
    its GPU copies, which Kineto widens by 1 ns on each side of the kernels they cover); one
    with neither keeps its host span's length, from its host start or, where the device was
    still running what the host issued before it, from the end of that, and ends before what
    the host issued after it begins."""
    has_compute = pl.col("compute_ns") > 0
    if copies is not None and copies.height:
        bounds = copies.group_by("action").agg(copy_start=pl.col("start").min() + 1,
                                               copy_end=pl.col("end").max() - 1)
        actions = actions.join(bounds, on="action", how="left")
    else:
        actions = actions.with_columns(copy_start=pl.lit(None, dtype=pl.Int64),
                                       copy_end=pl.lit(None, dtype=pl.Int64))
    device = actions.with_columns(
        start=pl.min_horizontal(pl.when(has_compute).then(pl.col("compute_start")), "copy_start"),
        end=pl.max_horizontal(pl.when(has_compute).then(pl.col("compute_end")), "copy_end"),
    ).drop("copy_start", "copy_end")
    # an action that ran nothing on the device (a first stage's input gradient) is drawn where
    # the device got to it: after what the host issued before it, not at the host's time,
    # which runs ahead of the kernels
    # (and before what it issued after it: the kernels' spans touch, a copy's is 1 ns wider)
    before = (device.with_row_index("_row").sort("host_start").with_columns(
        _after=pl.col("end").cum_max().forward_fill().shift(1),
        _next=pl.col("start").cum_min(reverse=True).backward_fill().shift(-1)).sort("_row"))
    at = pl.min_horizontal(pl.max_horizontal("host_start", "_after"), pl.col("_next") - 1)
    placed = before.with_columns(
        start=pl.col("start").fill_null(at),
        end=pl.col("end").fill_null(pl.min_horizontal(
            at + pl.col("host_end") - pl.col("host_start"), pl.max_horizontal(at, "_next"))),
    ).drop("_row", "_after", "_next")
    return placed.with_columns(  # where the order reads it (by compute start)
        compute_start=pl.when(has_compute).then("compute_start").otherwise("start"),
        compute_end=pl.when(has_compute).then("compute_end").otherwise("start"))
