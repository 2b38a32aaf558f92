"""GPU idle fraction of one rank, over the whole trace or over the steps HTA covers.

``steps="all"`` is pipeaudit's definition (docs/metrics.md): 1 − |union of every kernel,
memcpy and memset| / span, the span running from the first GPU activity to the
last, over the whole trace. It equals ``ranks[].idle_fraction`` of ``analyze`` on
GPU traces.

``steps="hta"`` reproduces Holistic Trace Analysis' temporal breakdown
(``hta/analyzers/breakdown_analysis.py`` with the filtering of
``hta/common/trace.py``, traceinsight 0.6.1 / HolisticTraceAnalysis 0.5.0):

* when the trace has at least two distinct ``ProfilerStep#N`` names, only GPU
  activity whose launch (the host event with the same correlation id) *starts
  before the last ProfilerStep starts* is kept; activity without a host launch
  is dropped. With fewer than two ProfilerSteps everything is kept;
* on traces with sub-microsecond timestamps, HTA rounds every event inward to
  whole microseconds (start up, end down, computed in float64 from the JSON µs
  values) before taking the union;
* idle = span − |union| over what is kept, span = first start to last end.

So HTA's figure covers every ProfilerStep but the last, plus any GPU work
launched before the first one. Torch-free and HTA-free (polars and numpy).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from pipeaudit.timeline import intervals as iv
from pipeaudit.timeline.ops import GPU_ACTIVITY_CATS
from pipeaudit.timeline.steps import PROFILER_STEP_RE

STEPS_MODES = ("all", "hta")


@dataclass(frozen=True)
class IdleFigure:
    """Idle fraction of one rank's GPU and what it covers."""

    rank: int
    steps: str  #: "all" or "hta"
    idle_fraction: float | None  #: None when the rank has no GPU activity
    busy_ns: int
    span_ns: int
    profiler_steps: list[int]  #: ProfilerStep numbers whose launches are covered
    dropped_steps: list[int]  #: ProfilerStep numbers left out (HTA: the last one)
    coverage: str  #: one phrase saying what the figure covers

    @property
    def short_coverage(self) -> str:
        """A few words for a table column, e.g. ``#551 (drops #552)``."""
        if self.steps == "all":
            return "whole trace"
        if not self.dropped_steps:
            return "whole trace (<2 steps)"
        return f"{_steps_text(self.profiler_steps)} (drops #{self.dropped_steps[0]})"


def gpu_idle(trace, steps: str = "all") -> IdleFigure:
    """Idle fraction of ``trace`` (a decoded :class:`~pipeaudit.trace.model.RankTrace`)."""
    if steps not in STEPS_MODES:
        raise ValueError(f"steps must be one of {STEPS_MODES}, got {steps!r}")
    ev = trace.events.filter(pl.col("cat") != "Trace")
    gpu = ev.filter(pl.col("cat").is_in(list(GPU_ACTIVITY_CATS)))
    names = _profiler_step_names(ev)
    numbers = sorted({int(n.split("#", 1)[1]) for n in names})
    dropped: list[int] = []
    if steps == "all":
        coverage = "whole trace"
        starts, ends = gpu["ts"].to_numpy(), (gpu["ts"] + gpu["dur"]).to_numpy()
    else:
        if len(names) >= 2:
            host = ev.filter(~pl.col("cat").is_in(list(GPU_ACTIVITY_CATS)))
            cutoff = int(host.filter(pl.col("name").is_in(list(names)))["ts"].max())
            launched = host.filter((pl.col("ts") < cutoff) & pl.col("correlation").is_not_null())
            gpu = gpu.join(launched.select("correlation").unique(), on="correlation", how="semi")
            dropped = [numbers[-1]]
            numbers = numbers[:-1]
            coverage = (f"GPU work launched before ProfilerStep#{dropped[0]} "
                        f"(steps {_steps_text(numbers)}; the last step is dropped, as HTA does)")
        else:
            coverage = "whole trace (fewer than 2 ProfilerSteps: HTA keeps everything)"
        starts, ends = _hta_times(gpu, trace.base_ns)
    merged = iv.merge(starts, ends)
    if merged[0].size == 0:
        return IdleFigure(trace.rank, steps, None, 0, 0, numbers, dropped, coverage)
    span = int(merged[1][-1] - merged[0][0])
    busy = iv.total(merged)
    idle = 1.0 - busy / span if span > 0 else None
    return IdleFigure(trace.rank, steps, idle, busy, span, numbers, dropped, coverage)


def _profiler_step_names(ev: pl.DataFrame) -> set[str]:
    return set(ev.filter(pl.col("name").str.contains(PROFILER_STEP_RE))["name"].to_list())


def _hta_times(gpu: pl.DataFrame, base_ns: int) -> tuple[np.ndarray, np.ndarray]:
    """Start and end in ns, rounded inward to whole µs in float64 as HTA does for ns traces."""
    rel = gpu["ts"].to_numpy() - base_ns
    dur = gpu["dur"].to_numpy()
    if not ((rel % 1000).any() or (dur % 1000).any()):
        return rel + base_ns, rel + dur + base_ns
    ts_us = rel / 1000.0  # the float64 HTA's JSON parser produces
    end_us = ts_us + dur / 1000.0
    start = np.ceil(ts_us).astype(np.int64) * 1000 + base_ns
    end = np.floor(end_us).astype(np.int64) * 1000 + base_ns
    return start, end


def _steps_text(numbers: list[int]) -> str:
    if not numbers:
        return "none"
    if numbers == list(range(numbers[0], numbers[-1] + 1)) and len(numbers) > 2:
        return f"#{numbers[0]}-#{numbers[-1]}"
    return ", ".join(f"#{n}" for n in numbers)
