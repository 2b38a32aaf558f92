"""Single-process pipelines: one trace, the stages on several devices (or on the CPU).

The classic teaching setup splits a model over ``cuda:0..N-1`` in one process and loops
over microbatches (naive, GPipe or 1F1B by hand): one rank's trace, yet a pipeline whose
stages are the devices. Such a trace is audited as a pipeline of one *device rank* per
device (device ``k`` in device order becomes rank ``k`` of the report): each action's compute
is split by the device its kernels ran on (an action whose kernels ran on two devices
counts on both), and a device's idle time is its own GPU activity's.

Without GPU kernels (a single-process run on the CPU), or with every kernel on one GPU, the
stages come from the annotations' stage ids, one rank per stage; its stages take turns on the
one device, so its bubble is at least (P-1)/P of each step whatever the schedule, and the
report says so.
"""

from __future__ import annotations

import dataclasses

import polars as pl

from pipeaudit.timeline import intervals as iv
from pipeaudit.timeline.rank import RankTimeline

CPU_NOTE = ("single-process run on the CPU: its stages run one after another on the host, so "
            "each stage idles while the others compute (bubble at least (P-1)/P of a step, "
            "whatever the schedule); on GPUs the stages overlap")

ONE_GPU_NOTE = ("single-process run with its stages on one GPU: they take turns on it, so each "
                "stage idles while the others compute (bubble at least (P-1)/P of a step, "
                "whatever the schedule), and each stage's peak memory is the GPU's, all stages "
                "together; a GPU per stage lets them overlap")


def single_process(ranks: list[RankTimeline], world_size: int | None) -> bool:
    """One rank's trace whose actions run on several devices, or name several stages."""
    if len(ranks) != 1 or world_size not in (None, 1):
        return False
    rt = ranks[0]
    if rt.actions.height == 0:
        return False
    if rt.device_compute is not None and rt.device_compute["device"].n_unique() > 1:
        return True
    return not rt.stage_from_rank and rt.actions["stage"].n_unique() > 1


def split_by_device(rt: RankTimeline) -> tuple[list[RankTimeline], str, str | None]:
    """One device rank per device (GPU) or per stage (one device), a note saying which, and
    the device the stages shared ("the CPU", "one GPU"; None when each has its own)."""
    if rt.device_compute is not None and rt.device_compute["device"].n_unique() > 1:
        devices = sorted(int(d) for d in rt.device_compute["device"].unique().drop_nulls().to_list())
        parts = [_device_part(rt, i, d, len(devices)) for i, d in enumerate(devices)]
        names = ", ".join(f"device {d} -> rank {i}" for i, d in enumerate(devices))
        return parts, (f"single-process pipeline over {len(devices)} devices: each device is a "
                       f"stage rank of this report ({names})"), None
    stages = sorted(int(s) for s in rt.actions["stage"].unique().to_list())
    parts = [_stage_part(rt, i, s, len(stages)) for i, s in enumerate(stages)]
    if rt.on_gpu:
        return parts, ONE_GPU_NOTE, "one GPU"
    return parts, CPU_NOTE, "the CPU"


def _device_part(rt: RankTimeline, index: int, device: int, count: int) -> RankTimeline:
    pieces = rt.device_compute.filter(pl.col("device") == device)  # type: ignore[union-attr]
    ids = pieces["action"].unique().sort()
    acts = rt.actions.with_row_index("_old").with_columns(pl.col("_old").cast(pl.Int64)) \
        .filter(pl.col("_old").is_in(ids.implode()))
    agg = pieces.group_by("action").agg(compute_ns=(pl.col("end") - pl.col("start")).sum(),
                                        compute_start=pl.col("start").min(),
                                        compute_end=pl.col("end").max())
    acts = acts.drop("compute_ns", "compute_start", "compute_end").join(
        agg.rename({"action": "_old"}), left_on="_old", right_on="_old", how="left")
    acts = acts.with_columns(start="compute_start", end="compute_end",
                             rank=pl.lit(index, dtype=pl.Int64))
    if rt.stage_from_rank:
        acts = acts.with_columns(stage=pl.lit(index, dtype=pl.Int64))
    remap = {int(old): new for new, old in enumerate(acts["_old"].to_list())}
    compute = pieces.select("action", "start", "end").with_columns(
        pl.col("action").replace_strict(remap, return_dtype=pl.Int64))
    activity = (rt.device_activity or {}).get(device, iv.merge(compute["start"].to_numpy(),
                                                                compute["end"].to_numpy()))
    return _part(rt, index, count, acts.drop("_old").select(rt.actions.columns), compute, activity,
                 device_memory=device)


def _stage_part(rt: RankTimeline, index: int, stage: int, count: int) -> RankTimeline:
    acts = rt.actions.with_row_index("_old").with_columns(pl.col("_old").cast(pl.Int64)) \
        .filter(pl.col("stage") == stage)
    remap = {int(old): new for new, old in enumerate(acts["_old"].to_list())}
    compute = rt.compute.filter(pl.col("action").is_in(list(remap))).with_columns(
        pl.col("action").replace_strict(remap, return_dtype=pl.Int64))
    acts = acts.drop("_old").with_columns(rank=pl.lit(index, dtype=pl.Int64))
    activity = iv.merge(compute["start"].to_numpy(), compute["end"].to_numpy())
    return _part(rt, index, count, acts, compute, activity, device_memory=None)


def _part(rt: RankTimeline, index: int, count: int, actions: pl.DataFrame, compute: pl.DataFrame,
          activity: iv.Intervals, *, device_memory: int | None) -> RankTimeline:
    memory, peaks = rt.memory, rt.memory_peak
    if device_memory is not None:
        memory = rt.memory.filter(pl.col("device_id") == device_memory)
        peaks = {d: v for d, v in rt.memory_peak.items() if d == device_memory}
    empty = rt.collectives.clear()
    return dataclasses.replace(
        rt, rank=index, world_size=count, actions=actions, compute=compute, activity=activity,
        comm=iv.empty(), other_compute=iv.empty(), memory=memory, memory_peak=peaks,
        collectives=empty, p2p=iv.empty(), p2p_tags=rt.p2p_tags.clear(), recv_summary=None,
        device_compute=None, device_activity=None, stage_from_rank=False, split_marks=[],
        totals_cache=None,
    )
