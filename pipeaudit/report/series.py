"""What the pictures draw, computed once from a :class:`Timeline` (all times absolute ns).

The Perfetto export, the HTML report and the static plots all show the same things: the step
windows, the bubble intervals of each rank (time in a step window with no compute, the
docs/metrics.md definition), the in-flight microbatches of each stage, the memory samples of each
rank, and the replay ideal of a step (the observed per-rank order replayed with the measured
compute durations and free communication, placed at the step's window start).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from pipeaudit.actions import Action
from pipeaudit.audit.windows import computes_by_rank, step_window
from pipeaudit.errors import ScheduleError
from pipeaudit.schedules import replay
from pipeaudit.timeline import intervals as iv
from pipeaudit.timeline.model import Timeline


@dataclass(frozen=True)
class Slice:
    """One interval on one rank, with what it was (an action, a bubble or an ideal action)."""

    rank: int
    stage: int
    kind: str
    microbatch: int
    step: int
    start: int
    end: int


def run_origin(tl: Timeline) -> int:
    """The run's zero: the earliest step span, activity, action or memory sample of any rank."""
    candidates: list[int] = []
    for rt in tl.ranks:
        if rt.steps.height:
            candidates.append(int(rt.steps["start"].min()))
        if rt.activity[0].size:
            candidates.append(int(rt.activity[0][0]))
        if rt.actions.height:
            candidates.append(int(rt.actions["start"].min()))
        if rt.memory.height:
            candidates.append(int(rt.memory["ts"].min()))
    return min(candidates) if candidates else 0


def step_windows(tl: Timeline) -> dict[int, tuple[int, int]]:
    """Step -> its window W_k (earliest compute start to latest compute end over all ranks)."""
    out: dict[int, tuple[int, int]] = {}
    by_rank = computes_by_rank(tl.ranks, list(tl.steps))
    for k in tl.steps:
        w = step_window([by_rank[rt.rank][k] for rt in tl.ranks])
        if w is not None:
            out[k] = w
    return out


def bubble_intervals(tl: Timeline, windows: dict[int, tuple[int, int]] | None = None
                     ) -> dict[int, list[tuple[int, int, int]]]:
    """Per rank, ``(step, start, end)`` of every interval of a step window without compute.

    Only ranks that run pipeline actions have bubbles; their lengths summed over a step and
    divided by |W_k| give that rank's bubble fraction in the step exactly.
    """
    windows = step_windows(tl) if windows is None else windows
    by_rank = computes_by_rank(tl.ranks, sorted(windows))
    out: dict[int, list[tuple[int, int, int]]] = {}
    for rt in tl.ranks:
        if not rt.actions.height:
            continue
        rows: list[tuple[int, int, int]] = []
        for k, (lo, hi) in sorted(windows.items()):
            window = (np.array([lo], dtype=np.int64), np.array([hi], dtype=np.int64))
            gaps = iv.subtract(window, iv.clip(by_rank[rt.rank][k], lo, hi))
            rows += [(k, int(s), int(e)) for s, e in zip(gaps[0], gaps[1])]
        out[rt.rank] = rows
    return out


def inflight_series(tl: Timeline) -> dict[int, list[tuple[int, int]]]:
    """Per stage, ``(time, microbatches in flight)`` after each change: +1 when an F ends,
    -1 when the B or I of a microbatch ends (F done - B done, docs/metrics.md)."""
    a = tl.actions
    if not a.height:
        return {}
    out: dict[int, list[tuple[int, int]]] = {}
    for stage in sorted(int(s) for s in a["stage"].unique().to_list()):
        rows = a.filter(pl.col("stage") == stage).select("kind", "compute_end").rows()
        events = sorted((int(t), 1 if k == "F" else -1) for k, t in rows if k in ("F", "B", "I"))
        series: list[tuple[int, int]] = []
        live = 0
        if events:
            series.append((events[0][0], 0))
        for t, d in events:
            live += d
            if series and series[-1][0] == t:
                series[-1] = (t, live)
            else:
                series.append((t, live))
        out[stage] = series
    return out


def memory_series(tl: Timeline) -> dict[int, dict[int, tuple[np.ndarray, np.ndarray]]]:
    """Per rank and device id, the ``[memory]`` samples ``(ts, total_allocated bytes)``."""
    out: dict[int, dict[int, tuple[np.ndarray, np.ndarray]]] = {}
    for rt in tl.ranks:
        if not rt.memory.height:
            continue
        per_dev: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for dev in sorted(int(d) for d in rt.memory["device_id"].unique().to_list()):
            m = rt.memory.filter(pl.col("device_id") == dev).sort("ts")
            m = m.filter(pl.col("total_allocated").is_not_null())
            per_dev[dev] = (m["ts"].to_numpy().astype(np.int64),
                            m["total_allocated"].to_numpy().astype(np.int64))
        out[rt.rank] = per_dev
    return out


def device_label(device_id: int) -> str:
    """``[memory]`` samples name the device by id; -1 is host (CPU) memory."""
    return "cpu" if device_id < 0 else f"device {device_id}"


def downsample(ts: np.ndarray, values: np.ndarray, max_points: int) -> tuple[np.ndarray, np.ndarray]:
    """At most about ``max_points`` samples that keep every bucket's maximum and minimum, so a
    peak survives (the first and last samples are kept)."""
    n = ts.size
    if n <= max_points or max_points < 4:
        return ts, values
    buckets = max_points // 2
    edges = np.linspace(0, n, buckets + 1).astype(np.int64)
    keep = {0, n - 1}
    for lo, hi in zip(edges[:-1], edges[1:]):
        if hi > lo:
            seg = values[lo:hi]
            keep.add(int(lo + np.argmax(seg)))
            keep.add(int(lo + np.argmin(seg)))
    idx = np.array(sorted(keep), dtype=np.int64)
    return ts[idx], values[idx]


def step_actions(tl: Timeline, step: int) -> list[Slice]:
    """The measured actions of ``step`` as compute slices (first to last compute)."""
    a = tl.actions.filter(pl.col("step") == step).sort(["rank", "compute_start"])
    return [Slice(int(r), int(s), str(k), int(m), step, int(cs), int(max(ce, cs)))
            for r, s, k, m, cs, ce in a.select("rank", "stage", "kind", "microbatch",
                                                "compute_start", "compute_end").iter_rows()]


def ideal_actions(tl: Timeline, step: int, window_start: int) -> list[Slice] | None:
    """The replay ideal of ``step``: each rank's observed order, measured compute durations,
    zero communication cost, placed so that it starts at ``window_start``.

    None when the stages are not 0..S-1 or the observed order cannot be replayed (e.g. a
    missing action makes it deadlock).
    """
    placement = tl.placement
    if not placement or sorted(placement) != list(range(len(placement))):
        return None
    pranks = sorted(set(placement.values()))
    index = {r: i for i, r in enumerate(pranks)}
    place = [index[placement[s]] for s in range(len(placement))]
    durations: dict[tuple[int, Action], float] = {}
    orders: list[list[Action]] = []
    for i, r in enumerate(pranks):
        rt = next(x for x in tl.ranks if x.rank == r)
        a = rt.actions.filter(pl.col("step") == step).sort(["compute_start", "start"])
        order = []
        for s, kind, m, c in a.select("stage", "kind", "microbatch", "compute_ns").iter_rows():
            act = Action(int(s), str(kind), int(m))
            order.append(act)
            durations[(i, act)] = float(c)
        orders.append(order)
    try:
        res = replay(orders, place, lambda rank, act: durations[(rank, act)], 0.0)
    except ScheduleError:
        return None
    t0 = res.window_start
    return [Slice(pranks[x.rank], x.action.stage, x.action.kind, x.action.microbatch, step,
                  window_start + int(round(x.start - t0)), window_start + int(round(x.end - t0)))
            for x in res.actions]
