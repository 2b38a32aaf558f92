"""Excluding the steps a damaged or partial trace does not hold completely.

* :func:`apply_cut` (a file read with ``salvage=True``): the trace ends at ``t_end``, the
  latest start among the recovered events, moved back by how far out of time order the file
  is (0 for torch 2.13's time-ordered traces); events ending after it are dropped, and so is
  every ``ProfilerStep#N`` that is not complete (its span ends after ``t_end``, or, on GPU
  traces, a kernel launched in it was not recovered). Only a prefix of complete steps is kept.
* :func:`mark_partial` (a failed harness rank's partial trace, header
  ``pipeaudit_incomplete_step: k``): ``ProfilerStep#k`` and later are excluded.
* :func:`align_steps` (the run): the steps after the last one complete on every damaged or
  partial rank are excluded on all ranks, matched by ProfilerStep number.

A trace without ``ProfilerStep`` spans (profiled without ``prof.step()``) counts its steps by
its optimizer's ``Optimizer.step#…`` spans instead: step n ends where the (n+1)-th of them
ends, and excluding the steps after n drops every host event that starts after that end (and
the device work those events launched).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Sequence

import numpy as np

from pipeaudit.errors import TraceError, TraceErrorKind as Kind
from pipeaudit.trace.salvage import SalvageReport

if TYPE_CHECKING:  # pragma: no cover
    from pipeaudit.trace.model import RankTrace

#: Header key of the partial traces the harness writes for failed ranks (the step that failed).
PARTIAL_KEY = "pipeaudit_incomplete_step"

_PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_OPTIMIZER_STEP = r"^Optimizer\.step#"  # as pipeaudit.timeline.steps.OPTIMIZER_STEP_PREFIX
PROFILER_LABEL = "ProfilerStep#"
OPTIMIZER_LABEL = "optimizer step #"
_GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset")


def _step_table(events):
    import polars as pl

    return (
        events.with_row_index("_row")
        .filter(pl.col("name").str.contains(_PROFILER_STEP.pattern))
        .select("_row", n=pl.col("name").str.extract(_PROFILER_STEP.pattern, 1)
                .cast(pl.Int64, strict=False), start="ts", end=pl.col("ts") + pl.col("dur"))
        .drop_nulls("n")  # ProfilerStep#<too many digits> is not a step
        .sort("n")
    )


def _optimizer_step_ends(events) -> list[int]:
    """Where each step ends, counted by ``Optimizer.step#…`` spans (step n: the n-th end)."""
    import polars as pl

    return (events.filter(pl.col("name").str.contains(_OPTIMIZER_STEP))
            .select(end=pl.col("ts") + pl.col("dur"))["end"].unique().sort().to_list())


def _has_profiler_steps(events) -> bool:
    return bool(events.height) and bool(events["name"].str.contains(_PROFILER_STEP.pattern).any())


def _drop_after(rt: "RankTrace", cut: int) -> int:
    """Drop what starts at or after ``cut`` on the host (device work is kept when a kept host
    event launched it: kernels run after their launch); return how many events went."""
    import polars as pl

    ev = rt.events
    late = pl.col("ts") >= cut
    device = pl.col("cat").is_in(list(_GPU_CATEGORIES))
    kept_corr = ev.filter(~late & ~device & pl.col("correlation").is_not_null())["correlation"]
    drop = late & ~(device & pl.col("correlation").is_in(kept_corr.implode()))
    before = ev.height
    rt.events = ev.filter(~drop)
    if rt.memory.height:
        rt.memory = rt.memory.filter(pl.col("ts") < cut)
    return before - rt.events.height


def apply_cut(rt: "RankTrace", report: SalvageReport) -> None:
    """Cut a salvaged rank at the damage: drop spans that end after the trace does and
    every incomplete step (see the module docstring). Mutates ``rt``; raises TraceError
    when no complete event or no complete step survives."""
    import polars as pl

    ev = rt.events
    report.rank = rt.rank
    if ev.height == 0:
        raise TraceError(rt.path, f"{report.damage}; --salvage recovered {report.events_recovered:,} "
                                  "events but no complete event (ph X) among them", Kind.SALVAGE_FAILED)
    end = int(ev["ts"].max())  # type: ignore[arg-type]
    if report.last_start_ns is not None and report.last_start_ns > end:
        end = report.last_start_ns
    # in a file out of time order by up to L, only what started before end - L is known whole
    end -= report.order_lag_ns
    report.end_ns = end
    report.start_ns = int(ev["ts"].min())  # type: ignore[arg-type]
    steps = _step_table(ev)
    report.steps_found = sorted(set(steps["n"].to_list()))
    if report.all_events:  # the damage is after the events: nothing was lost
        report.last_complete_step = report.steps_found[-1] if report.steps_found else None
        rt.salvage = report
        rt.warnings.append(report.describe())
        return
    complete = (steps["end"] <= end).to_list()
    launches = ev.filter((pl.col("cat") == "cuda_runtime") & pl.col("name").str.contains("Launch")
                         & pl.col("correlation").is_not_null())
    if launches.height and steps.height:  # kernels run after their launches: were they recovered?
        gpu_corr = ev.filter(pl.col("cat").is_in(list(_GPU_CATEGORIES)))["correlation"].drop_nulls()
        lost = launches.filter(~pl.col("correlation").is_in(gpu_corr.implode()))
        lost_ts = lost["ts"].to_numpy()
        for i, (s, e) in enumerate(steps.select("start", "end").iter_rows()):
            if complete[i] and lost_ts.size and ((lost_ts >= s) & (lost_ts < e)).any():
                complete[i] = False
    kept_steps: list[int] = []
    for n, ok in zip(steps["n"].to_list(), complete):
        if not ok:
            break
        kept_steps.append(n)
    if steps.height and not kept_steps:
        first = steps.row(0, named=True)
        if end >= first["start"]:
            why = (f"the trace ends inside ProfilerStep#{first['n']} "
                   f"({(end - first['start']) / 1e6:.3f} ms after it starts)")
        else:
            why = f"nothing after the start of ProfilerStep#{first['n']} is known to be whole"
        if report.order_lag_ns:
            why += (f"; its events are out of time order by up to {report.order_lag_ns / 1e6:.3f} ms "
                    "(written grouped by thread or device?), which moves the cut back by as much")
        raise TraceError(rt.path, f"{report.damage}; --salvage recovered {report.events_recovered:,} "
                                  f"events but no complete step: {why}", Kind.SALVAGE_FAILED)
    report.last_complete_step = kept_steps[-1] if kept_steps else None
    report.excluded_steps = [n for n in report.steps_found if n not in set(kept_steps)]
    drop_rows = steps.filter(pl.col("n").is_in(report.excluded_steps))["_row"]
    cut = (ev["ts"] + ev["dur"]) > end
    report.events_cut = int(cut.sum())
    keep = ~cut
    if drop_rows.len():
        keep = keep & ~pl.Series(np.isin(np.arange(ev.height), drop_rows.to_numpy()))
    rt.events = ev.filter(keep)
    if rt.memory.height:
        rt.memory = rt.memory.filter(pl.col("ts") <= end)
    rt.salvage = report
    rt.warnings.append(report.describe())


def exclude_steps_after(rt: "RankTrace", last: int) -> list[int]:
    """Drop the steps numbered above ``last``; return their numbers. Steps are ProfilerStep
    spans, else counted by ``Optimizer.step#…`` spans (see the module docstring)."""
    import polars as pl

    if not _has_profiler_steps(rt.events):
        return _exclude_optimizer_steps_after(rt, last)
    steps = _step_table(rt.events)
    gone = steps.filter(pl.col("n") > last)
    if gone.height:
        mask = np.isin(np.arange(rt.events.height), gone["_row"].to_numpy())
        rt.events = rt.events.filter(~pl.Series(mask))
    return sorted(set(gone["n"].to_list()))


def _exclude_optimizer_steps_after(rt: "RankTrace", last: int) -> list[int]:
    import polars as pl

    ends = _optimizer_step_ends(rt.events)
    if last >= len(ends):  # step ``last`` never ended here: nothing after it to drop
        return []
    # steps last+1 .. len-1 ended here; work after the last optimizer step is one more, unended
    trailing = rt.events.filter((pl.col("ts") >= ends[-1])
                                & ~pl.col("cat").is_in(list(_GPU_CATEGORIES))).height > 0
    _drop_after(rt, ends[last])
    return list(range(last + 1, len(ends) + int(trailing)))


def align_steps(ranks: Sequence["RankTrace"]) -> list[str]:
    """Exclude, on every rank, the steps after the last one complete on all salvaged ranks.

    Returns set-level warnings. Ranks are matched by ProfilerStep number (the harness and
    torch.profiler number steps alike on every rank)."""
    for rt in ranks:
        if rt.salvage is None and rt.header.get(PARTIAL_KEY) is not None:
            mark_partial(rt)
    salvaged = [rt for rt in ranks if getattr(rt, "salvage", None) is not None]
    lasts = [(rt.salvage.last_complete_step, rt) for rt in salvaged
             if rt.salvage.last_complete_step is not None]
    if not lasts:
        return []
    last, limiting = min(lasts, key=lambda x: x[0])
    others: list[int] = []  # ranks that held complete steps after ``last``
    for rt in ranks:
        gone = exclude_steps_after(rt, last)  # a rank's own cut steps are already gone
        if not gone:
            continue
        others.append(rt.rank)
        if rt.salvage is not None:
            rt.salvage.excluded_steps = sorted(set(rt.salvage.excluded_steps) | set(gone))
            rt.salvage.last_complete_step = last
    if not others:
        return []
    from pipeaudit.trace.validate import format_ranks

    why = "is partial" if limiting.salvage.kind == "partial" else "is damaged"
    return [f"steps after {limiting.salvage.step_label}{last} are excluded on every rank: the trace of rank "
            f"{limiting.rank} ({limiting.path.name}) {why} after it (rank{'s' if len(others) > 1 else ''} "
            f"{format_ranks(others)} held later steps)"]


def mark_partial(rt: "RankTrace") -> None:
    """A partial trace the pipeaudit harness wrote for a rank that failed (or was stopped)
    during ``ProfilerStep#k`` (header ``pipeaudit_incomplete_step``): the file is intact, but
    step k and later are not. Excludes them like a salvaged cut; raises when k is the first."""
    k = rt.header.get(PARTIAL_KEY)
    if not (isinstance(k, int) and not isinstance(k, bool) and k >= 0):
        raise TraceError(rt.path, f"{PARTIAL_KEY} is {k!r}, expected an integer >= 0", Kind.BAD_VALUE)
    label = PROFILER_LABEL if _has_profiler_steps(rt.events) else OPTIMIZER_LABEL
    if label == PROFILER_LABEL:
        found = sorted(set(_step_table(rt.events)["n"].to_list()))
    else:  # every optimizer step ends a step; the work after the last one is step k's
        found = sorted(set(range(len(_optimizer_step_ends(rt.events)))) | {k})
    kept = [n for n in found if n < k]
    during = (f"{label}{k}" if label == PROFILER_LABEL
              else f"profiled step {k} (steps counted by its Optimizer.step spans)")
    if not kept:
        raise TraceError(rt.path, f"a partial trace: the harness stopped rank {rt.rank} during "
                                  f"{during}, before any step was complete", Kind.SET)
    report = SalvageReport(
        path=str(rt.path), damage=f"a partial trace: the harness stopped rank {rt.rank} during "
                                  f"{during} (its run failed)",
        size_bytes=rt.size_bytes, bytes_read=rt.size_bytes, json_bytes=rt.size_bytes,
        events_recovered=rt.events.height, rank=rt.rank, kind="partial",
        start_ns=rt.start_ns, end_ns=rt.end_ns, steps_found=found, last_complete_step=kept[-1],
        all_events=True, step_label=label,
    )
    report.excluded_steps = exclude_steps_after(rt, kept[-1])
    rt.salvage = report
    rt.warnings.append(report.describe())
