"""Classify one rank's events into compute units, communication and activity.

A *compute unit* is a piece of compute that can be attributed to an action:
on CPU traces a top-level (not nested in another op) non-communication CPU op;
on GPU traces a non-communication kernel, attributed through the time of its
launch (the ``cuda_runtime``/``hip`` call with the same correlation id), or,
for a kernel without a launch event, through the GPU copy of the annotation it
ran in (``gpu_user_annotation``).

Columns of :attr:`RankOps.units`: ``start``, ``end`` (when the compute ran),
``anchor`` (the time used to attribute the unit to an action span: the op's
start on CPU, the launch time on GPU; null for a kernel whose launch is not in
the trace), ``tid`` (thread of the anchor), ``name``, ``backward`` (an
autograd-engine op, used for inference), ``device`` and ``stream`` (GPU units;
null on CPU).

Kineto writes every ``record_function`` span twice on GPU traces: the CPU
``user_annotation`` and a ``gpu_user_annotation`` copy per stream, covering the
kernels launched inside it (1 ns wider on each side), with the same
``External id``. Only the CPU spans are action candidates (:attr:`RankOps.spans`);
the copies are kept apart (:attr:`RankOps.gpu_spans`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from pipeaudit.timeline import intervals as iv

COMM_OP_RE = r"^(c10d::|gloo:|nccl:|record_param_comms|ProcessGroup|c10d_functional::|_c10d_functional::)"
#: NCCL/RCCL kernels: ``ncclKernel_*`` (NCCL < 2.19), ``ncclDevKernel_*`` (current), and the
#: collective names other libraries use.
COMM_KERNEL_RE = (r"(?i)(nccl|rccl|sendrecv|allreduce|all_reduce|allgather|all_gather|"
                  r"reducescatter|reduce_scatter|broadcast|alltoall)")
SEND_OP_RE = r"^c10d::(send|isend)|^gloo:send|^nccl:send"
P2P_OP_RE = r"^c10d::(send|isend|recv_|irecv|recv_any_source_)|^(gloo|nccl):(send|recv)"
#: Point-to-point communication kernels (NCCL/RCCL send/recv, old and new names).
P2P_KERNEL_RE = r"(?i)sendrecv|nccl(dev)?kernel_(send|recv)"
BACKWARD_OP_PREFIX = "autograd::engine::evaluate_function"
#: Ops that, right before a point-to-point op, prepare its tensors: torch's
#: ``get_fwd_send_ops`` detaches each output it sends and its last stage ``detach_``es its
#: output after the backward; Megatron-core allocates each receive buffer (``torch.empty``)
#: just before the transfer. A sent output carries the gradient's way back (no model detaches
#: it) and no model's output is a fresh allocation: such an op belongs to the transfer, never
#: to an action's compute (docs/metrics.md).
P2P_PREP_OPS = ("aten::detach", "aten::detach_", "aten::empty")
GPU_ACTIVITY_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATS = ("cuda_runtime", "cuda_driver", "hip_runtime", "hip_driver")
CPU_OP_CATS = ("cpu_op", "operator", "")
#: Categories of host-side annotation spans (``record_function``): action candidates.
HOST_SPAN_CATS = ("user_annotation", "cpu_op", "python_function", "")
GPU_SPAN_CAT = "gpu_user_annotation"
ANNOTATION_CATS = ("user_annotation", GPU_SPAN_CAT, "cpu_instant_event")

UNIT_SCHEMA = {"start": pl.Int64, "end": pl.Int64, "anchor": pl.Int64, "tid": pl.Utf8,
               "name": pl.Utf8, "backward": pl.Boolean, "device": pl.Int64, "stream": pl.Int64}


@dataclass
class RankOps:
    """What one rank did, reduced to what the audit needs."""

    rank: int
    on_gpu: bool
    units: pl.DataFrame  # UNIT_SCHEMA
    cpu_ops: pl.DataFrame  # top-level CPU ops of every thread: tid, start, end, name, comm, backward, send, p2p, p2p_prep
    comm: iv.Intervals
    activity: iv.Intervals
    spans: pl.DataFrame  # host annotation spans: name, tid, start, end, cat, external_id
    #: GPU copies of annotation spans: name, stream, device, start, end, external_id
    gpu_spans: pl.DataFrame
    #: communication kernels (GPU traces): name, start, end, anchor, tid, device, stream,
    #: correlation, src_rank, dst_rank, seq
    comm_kernels: pl.DataFrame
    #: collective instances (all-reduce, reduce-scatter, all-gather, ...): name, start, end;
    #: gloo/nccl lifetime spans or NCCL kernels where the trace has them, else the c10d ops
    collectives: pl.DataFrame
    #: point-to-point instances (send/recv), the same way: name, start, end
    p2p: pl.DataFrame
    #: GPU traces: every kernel, memcpy and memset, per device
    device_activity: dict[int, iv.Intervals] | None = None


def _col(df: pl.DataFrame, name: str, dtype: pl.DataType) -> pl.Expr:
    """Column ``name`` when the decode built it, else nulls of ``dtype``."""
    return pl.col(name) if name in df.columns else pl.lit(None, dtype=dtype)


def _top_level(ops: pl.DataFrame) -> pl.DataFrame:
    """Keep the ops not nested inside another op of the same thread, ordered by thread, start,
    then those of no duration first and the longest first. An op of no duration
    that starts with another comes before it, not inside it (a recv that found its data
    already there, then the forward that uses it)."""
    if ops.height == 0:
        return ops
    start, end = ops["start"].to_numpy(), ops["end"].to_numpy()
    if not _in_start_order(start, end):
        return _top_level_sorted(ops)
    keep = np.empty(ops.height, dtype=bool)
    for rows in _thread_rows(ops["tid"]):
        keep[rows] = _outermost(start[rows], end[rows])
    return _in_thread_order(ops.filter(pl.Series(keep)))


def _in_start_order(start: np.ndarray, end: np.ndarray) -> bool:
    """True when the rows are in the decoded events' order: by start, the longest first."""
    later = start[1:] > start[:-1]
    return bool((later | ((start[1:] == start[:-1]) & (end[1:] <= end[:-1]))).all())


def _thread_rows(tid: pl.Series) -> list[np.ndarray | slice]:
    """The rows of each thread, in row order."""
    if tid.null_count() == 0 and bool((tid == tid[0]).all()):
        return [slice(None)]  # CPU training: one thread runs every op
    groups = tid.to_frame("tid").with_row_index("row").group_by("tid").agg("row")
    return [np.asarray(rows, dtype=np.int64) for rows in groups["row"].to_list()]


def _outermost(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Which of one thread's ops (by start, the longest first) no earlier op contains: a
    lasting op starts at or after the end of every op before it; an op of no duration at or
    after the end of every op that started strictly before it."""
    reach = np.maximum.accumulate(end)
    keep = np.empty(start.size, dtype=bool)
    keep[0] = True
    np.less_equal(reach[:-1], start[1:], out=keep[1:])
    at = np.flatnonzero(end == start)  # of no duration: only what started strictly before
    if at.size:
        first = np.searchsorted(start, start[at], side="left")
        keep[at] = (first == 0) | (reach[np.maximum(first - 1, 0)] <= start[at])
    return keep


def _in_thread_order(ops: pl.DataFrame) -> pl.DataFrame:
    return ops.with_columns(_lasts=pl.col("end") > pl.col("start")).sort(
        ["tid", "start", "_lasts", "end"], descending=[False, False, False, True],
        maintain_order=True).drop("_lasts")


def _top_level_sorted(ops: pl.DataFrame) -> pl.DataFrame:
    """:func:`_top_level` of rows in any order."""
    ops = _in_thread_order(ops)
    prev_end = pl.col("end").cum_max().shift(1).over("tid")
    return ops.filter(prev_end.is_null() | (pl.col("start") >= prev_end))


def classify(rank: int, events: pl.DataFrame) -> RankOps:
    """Split a rank's complete events into compute units, communication and activity."""
    if events.height and not bool((events["ph"] == "X").all()):
        events = events.filter(pl.col("ph") == "X")  # decoded traces hold only X events
    x = events.with_columns(
        start=pl.col("ts"), end=pl.col("ts") + pl.col("dur"),
        _lifetime=pl.col("name").str.starts_with("gloo:") | pl.col("name").str.starts_with("nccl:"),
        external_id=_col(events, "external_id", pl.Int64()),
    )
    cats = x.get_column("cat")
    on_gpu = bool(cats.is_in(list(GPU_ACTIVITY_CATS)).any())

    # each table selects its columns before it filters: a filter copies every column it carries
    cpu = x.select("tid", "start", "end", "name", "cat").filter(pl.col("cat").is_in(list(CPU_OP_CATS)))
    top = _top_level(cpu.select("tid", "start", "end", "name")).with_columns(
        comm=pl.col("name").str.contains(COMM_OP_RE),
        backward=pl.col("name").str.starts_with(BACKWARD_OP_PREFIX),
        send=pl.col("name").str.contains(SEND_OP_RE),
        p2p=pl.col("name").str.contains(P2P_OP_RE),
    )
    top = top.with_columns(_p2p_preparation(top))
    lifetimes = x.select("name", "start", "end", "cat", "_lifetime").filter(
        pl.col("cat").is_in(list(ANNOTATION_CATS)) & pl.col("_lifetime"))
    spans = x.select("name", "tid", "start", "end", "cat", "external_id", "_lifetime").filter(
        pl.col("cat").is_in(list(HOST_SPAN_CATS)) & ~pl.col("_lifetime")).drop("_lifetime")
    gpu_spans = x.filter((pl.col("cat") == GPU_SPAN_CAT) & ~pl.col("_lifetime")).select(
        "name", stream=_stream(x), device=_device(x), start="start", end="end",
        external_id="external_id")

    if on_gpu:
        units, comm_kernels, gpu_activity = _gpu_units(x)
        comm = iv.merge(
            np.concatenate([comm_kernels["start"].to_numpy(), lifetimes["start"].to_numpy()]),
            np.concatenate([comm_kernels["end"].to_numpy(), lifetimes["end"].to_numpy()]),
        )
        # GPU idle counts every kernel, memcpy and memset (as HTA's temporal breakdown).
        activity = iv.merge(gpu_activity["start"].to_numpy(), gpu_activity["end"].to_numpy())
        per_device = gpu_activity.with_columns(_dev=_device(gpu_activity))
        device_activity = {int(d): iv.merge(g["start"].to_numpy(), g["end"].to_numpy())
                           for (d,), g in per_device.partition_by("_dev", as_dict=True).items()
                           if d is not None}
    else:
        compute_ops = top.filter(~pl.col("comm") & ~pl.col("p2p_prep"))
        units = compute_ops.select(
            "start", "end", anchor=pl.col("start"), tid="tid", name="name", backward="backward",
            device=pl.lit(None, dtype=pl.Int64), stream=pl.lit(None, dtype=pl.Int64),
        )
        comm_ops = top.filter(pl.col("comm"))
        comm = iv.merge(
            np.concatenate([comm_ops["start"].to_numpy(), lifetimes["start"].to_numpy()]),
            np.concatenate([comm_ops["end"].to_numpy(), lifetimes["end"].to_numpy()]),
        )
        compute = iv.merge(units["start"].to_numpy(), units["end"].to_numpy())
        activity = iv.union(compute, comm)
        comm_kernels = _empty_comm_kernels()
        device_activity = None
    collectives, p2p = _instances(top, lifetimes, comm_kernels, on_gpu)
    return RankOps(rank=rank, on_gpu=on_gpu, units=units, cpu_ops=top, comm=comm,
                   activity=activity, spans=spans, gpu_spans=gpu_spans,
                   comm_kernels=comm_kernels, collectives=collectives, p2p=p2p,
                   device_activity=device_activity)


def _p2p_preparation(top: pl.DataFrame) -> pl.Series:
    """Which top-level ops (rows by thread, then start) are a run of :data:`P2P_PREP_OPS` that
    a point-to-point op of the same thread follows."""
    n = top.height
    prep = top["name"].is_in(list(P2P_PREP_OPS)).to_numpy()
    if not prep.any():
        return pl.Series("p2p_prep", np.zeros(n, dtype=bool))
    rows = np.arange(n)
    # the first row at or after each that is no preparation op
    after = np.minimum.accumulate(np.where(prep, n, rows)[::-1])[::-1]
    tid, p2p = top["tid"].to_numpy(), top["p2p"].to_numpy()
    ok = prep & (after < n)
    j = after[ok]
    ok[ok] = (tid[j] == tid[ok]) & p2p[j]
    return pl.Series("p2p_prep", ok)


def _instances(top: pl.DataFrame, lifetimes: pl.DataFrame, comm_kernels: pl.DataFrame,
               on_gpu: bool) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(collective instances, point-to-point instances), each ``name, start, end``: on GPU
    the NCCL kernels, on CPU the gloo/nccl lifetime spans, else the c10d ops."""
    cols = ["name", "start", "end"]
    if on_gpu:
        source = comm_kernels.select(cols)
        is_p2p = pl.col("name").str.contains(P2P_KERNEL_RE)
        if "src_rank" in comm_kernels.columns:
            source = comm_kernels.select(cols + ["src_rank", "dst_rank"])
            is_p2p = is_p2p | pl.col("src_rank").is_not_null() | pl.col("dst_rank").is_not_null()
        return source.filter(~is_p2p).select(cols), source.filter(is_p2p).select(cols)
    is_p2p = pl.col("name").str.contains(P2P_OP_RE)
    spans = lifetimes.select(cols)
    ops = top.filter(pl.col("comm") & ~pl.col("name").str.starts_with("record_param_comms")).select(cols)
    out = []
    for want in (~is_p2p, is_p2p):
        from_spans = spans.filter(want)
        out.append(from_spans if from_spans.height else ops.filter(want))
    return out[0], out[1]


def _stream(x: pl.DataFrame) -> pl.Expr:
    """A GPU event's stream: ``args.stream``, else its tid (Kineto writes the stream there)."""
    return pl.coalesce(_col(x, "stream", pl.Int64()), pl.col("tid").cast(pl.Int64, strict=False))


def _device(x: pl.DataFrame) -> pl.Expr:
    """A GPU event's device: ``args.device``, else its pid (Kineto's GPU process is the device)."""
    pid = _col(x, "pid", pl.Utf8()).cast(pl.Int64, strict=False)
    return pl.coalesce(_col(x, "device", pl.Int64()), pid)


def _empty_comm_kernels() -> pl.DataFrame:
    return pl.DataFrame(schema={
        "name": pl.Utf8, "start": pl.Int64, "end": pl.Int64, "anchor": pl.Int64, "tid": pl.Utf8,
        "device": pl.Int64, "stream": pl.Int64, "correlation": pl.Int64,
        "src_rank": pl.Int64, "dst_rank": pl.Int64, "seq": pl.Int64})


def _gpu_units(x: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Compute kernels with their launch; communication kernels with theirs; all GPU activity."""
    gpu = x.filter(pl.col("cat").is_in(list(GPU_ACTIVITY_CATS)))
    is_comm = pl.col("name").str.contains(COMM_KERNEL_RE)
    launches = (
        x.filter(pl.col("cat").is_in(list(LAUNCH_CATS)) & pl.col("correlation").is_not_null())
        .select("correlation", anchor=pl.col("start"), launch_tid=pl.col("tid"))
        .unique("correlation", keep="first")
    )
    kernels = gpu.filter(pl.col("cat") == "kernel").with_columns(
        device=_device(gpu), stream=_stream(gpu)
    ).join(launches, on="correlation", how="left")
    units = kernels.filter(~is_comm).select(
        "start", "end", "anchor", tid="launch_tid", name="name", backward=pl.lit(False),
        device="device", stream="stream",
    )
    comm_kernels = kernels.filter(is_comm).select(
        "name", "start", "end", "anchor", tid="launch_tid", device="device", stream="stream",
        correlation="correlation",
        src_rank=_col(kernels, "src_rank", pl.Int64()), dst_rank=_col(kernels, "dst_rank", pl.Int64()),
        seq=_col(kernels, "seq", pl.Int64()),
    )
    return units, comm_kernels, gpu
