"""Classify one rank's events into compute units, communication and activity.

A *compute unit* is a piece of compute that can be attributed to an action:
on CPU traces a top-level (not nested in another op) non-communication CPU op;
on GPU traces a non-communication kernel, attributed through the time of its
launch (the ``cuda_runtime``/``hip`` call with the same correlation id).

Columns of :attr:`RankOps.units`: ``start``, ``end`` (when the compute ran),
``anchor`` (the time used to attribute the unit to an action span: the op's
start on CPU, the launch time on GPU), ``tid`` (thread of the anchor),
``name`` and ``backward`` (an autograd-engine op, used for inference).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from pipeaudit.timeline import intervals as iv

COMM_OP_RE = r"^(c10d::|gloo:|nccl:|record_param_comms|ProcessGroup|c10d_functional::|_c10d_functional::)"
COMM_KERNEL_RE = r"(?i)(nccl|rccl|sendrecv|allreduce|all_reduce|allgather|reducescatter|broadcast)"
SEND_OP_RE = r"^c10d::(send|isend)|^gloo:send|^nccl:send"
P2P_OP_RE = r"^c10d::(send|isend|recv_|irecv|recv_any_source_)|^(gloo|nccl):(send|recv)"
BACKWARD_OP_PREFIX = "autograd::engine::evaluate_function"
GPU_ACTIVITY_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATS = ("cuda_runtime", "cuda_driver", "hip_runtime", "hip_driver")
CPU_OP_CATS = ("cpu_op", "operator", "")
ANNOTATION_CATS = ("user_annotation", "gpu_user_annotation", "cpu_instant_event")


@dataclass
class RankOps:
    """What one rank did, reduced to what the audit needs."""

    rank: int
    on_gpu: bool
    units: pl.DataFrame
    cpu_ops: pl.DataFrame  # top-level CPU ops of every thread: tid, start, end, name, comm, backward, send
    comm: iv.Intervals
    activity: iv.Intervals
    spans: pl.DataFrame  # annotation spans (user_annotation and friends): name, tid, start, end

    @property
    def first_activity(self) -> int | None:
        return int(self.activity[0][0]) if self.activity[0].size else None

    @property
    def last_activity(self) -> int | None:
        return int(self.activity[1][-1]) if self.activity[1].size else None


def _top_level(ops: pl.DataFrame) -> pl.DataFrame:
    """Keep the ops not nested inside another op of the same thread."""
    if ops.height == 0:
        return ops
    ops = ops.sort(["tid", "start", "end"], descending=[False, False, True])
    prev_end = pl.col("end").cum_max().shift(1).over("tid")
    return ops.filter(prev_end.is_null() | (pl.col("start") >= prev_end))


def classify(rank: int, events: pl.DataFrame) -> RankOps:
    """Split a rank's complete events into compute units, communication and activity."""
    if events.height and not bool((events["ph"] == "X").all()):
        events = events.filter(pl.col("ph") == "X")  # decoded traces hold only X events
    x = events.with_columns(
        start=pl.col("ts"), end=pl.col("ts") + pl.col("dur"),
        _lifetime=pl.col("name").str.contains(r"^(gloo|nccl):"),
    )
    cats = x.get_column("cat")
    on_gpu = bool(cats.is_in(list(GPU_ACTIVITY_CATS)).any())

    cpu = x.filter(pl.col("cat").is_in(list(CPU_OP_CATS)))
    top = _top_level(cpu.select("tid", "start", "end", "name")).with_columns(
        comm=pl.col("name").str.contains(COMM_OP_RE),
        backward=pl.col("name").str.starts_with(BACKWARD_OP_PREFIX),
        send=pl.col("name").str.contains(SEND_OP_RE),
        p2p=pl.col("name").str.contains(P2P_OP_RE),
    )
    lifetimes = x.filter(pl.col("cat").is_in(list(ANNOTATION_CATS)) & pl.col("_lifetime"))
    spans = x.filter(
        pl.col("cat").is_in(["user_annotation", "gpu_user_annotation", "cpu_op", "python_function", ""])
        & ~pl.col("_lifetime")
    ).select("name", "tid", "start", "end", "cat")

    if on_gpu:
        units, comm_kernels, gpu_activity = _gpu_units(x)
        comm = iv.merge(
            np.concatenate([comm_kernels["start"].to_numpy(), lifetimes["start"].to_numpy()]),
            np.concatenate([comm_kernels["end"].to_numpy(), lifetimes["end"].to_numpy()]),
        )
        # GPU idle counts every kernel, memcpy and memset (as HTA's temporal breakdown).
        activity = iv.merge(gpu_activity["start"].to_numpy(), gpu_activity["end"].to_numpy())
    else:
        compute_ops = top.filter(~pl.col("comm"))
        units = compute_ops.select(
            "start", "end", anchor=pl.col("start"), tid="tid", name="name", backward="backward"
        )
        comm_ops = top.filter(pl.col("comm"))
        comm = iv.merge(
            np.concatenate([comm_ops["start"].to_numpy(), lifetimes["start"].to_numpy()]),
            np.concatenate([comm_ops["end"].to_numpy(), lifetimes["end"].to_numpy()]),
        )
        compute = iv.merge(units["start"].to_numpy(), units["end"].to_numpy())
        activity = iv.union(compute, comm)
    return RankOps(rank=rank, on_gpu=on_gpu, units=units, cpu_ops=top, comm=comm,
                   activity=activity, spans=spans)


def _gpu_units(x: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Compute kernels with their launch time; communication kernels; all GPU activity."""
    gpu = x.filter(pl.col("cat").is_in(list(GPU_ACTIVITY_CATS)))
    is_comm = pl.col("name").str.contains(COMM_KERNEL_RE)
    kernels = gpu.filter((pl.col("cat") == "kernel") & ~is_comm)
    comm_kernels = gpu.filter((pl.col("cat") == "kernel") & is_comm)
    launches = (
        x.filter(pl.col("cat").is_in(list(LAUNCH_CATS)) & pl.col("correlation").is_not_null())
        .select("correlation", anchor=pl.col("start"), tid=pl.col("tid"))
        .unique("correlation", keep="first")
    )
    joined = kernels.join(launches.rename({"tid": "launch_tid"}), on="correlation", how="left")
    units = joined.select(
        "start",
        "end",
        anchor=pl.coalesce("anchor", "start"),
        tid=pl.coalesce("launch_tid", "tid"),
        name="name",
        backward=pl.lit(False),
    )
    return units, comm_kernels, gpu
