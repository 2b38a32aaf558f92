"""The profiled part of a rank's run: warm-up steps, then the profiled steps (imports torch).

Shared by the multi-process worker (``worker``) and ``--single-process`` (``single``). Two ways
to profile:

* step marks (default): a ``torch.profiler`` schedule with ``prof.step()`` after each step, so
  every profiled step is a ``ProfilerStep#i`` span (i from 0);
* ``--no-step-marks``: a plain ``with torch.profiler.profile():`` around the steps, as users
  often write it: no schedule, no ``prof.step()``, no ``ProfilerStep`` span. The optimizer's own
  spans (``Optimizer.zero_grad#SGD.zero_grad``, ``Optimizer.step#SGD.step``) still close every
  step.

Either way the trace is written by ``on_trace_ready`` when the profiler stops, also when the
rank fails or is stopped (SIGTERM) during a profiled step: then as ``partial-rank{r}.json.gz``
with the header key ``pipeaudit_incomplete_step`` = k, the profiled step (from 0) that was cut:
steps 0..k-1 are complete. With step marks they are ``ProfilerStep#0..k-1``; without, each
complete step ends with its ``Optimizer.step#SGD.step`` span, and what follows the k-th such
span is the cut step.
"""

from __future__ import annotations

import contextlib
import json
import signal
import threading
from pathlib import Path
from typing import Callable

from torch.profiler import ProfilerActivity, profile, schedule

from pipeaudit.harness.config import ProfileConfig
from pipeaudit.harness.manifest import trace_name
from pipeaudit.harness.status import Reporter

PARTIAL_PREFIX = "partial-"
#: Header key of a partial trace: the profiled step (from 0) during which the rank stopped
#: (pipeaudit.trace.cut.PARTIAL_KEY; the analysis excludes that step and later ones).
INCOMPLETE_STEP_KEY = "pipeaudit_incomplete_step"


class RankRun:
    """What one rank's profiled run has done so far (for the trace's file name)."""

    def __init__(self, config: ProfileConfig, rank: int) -> None:
        self.config = config
        self.rank = rank
        self.failed = False
        self.profiled_done = 0  #: profiled steps finished
        self.trace_written: str | None = None

    def on_trace_ready(self, prof) -> None:
        out = Path(self.config.out)
        name = trace_name(self.rank)
        if self.failed or self.profiled_done < self.config.steps:
            name = PARTIAL_PREFIX + name
        with sigterm_deferred():  # a stop request must not cut the trace being written
            prof.export_chrome_trace(str(out / name))
        self.trace_written = name


class Stopped(BaseException):
    """Raised in a worker by SIGTERM (the launcher stopping a failed or timed-out run, or
    torchrun): the profiled steps unwind, so the trace of the finished steps is written."""


@contextlib.contextmanager
def sigterm_deferred():
    """Ignore SIGTERM inside the block (the launcher SIGKILLs after its grace period)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def stop_on_sigterm(run: RankRun):
    """SIGTERM raises :class:`Stopped` inside the block (main thread only), unless the rank is
    already unwinding (``run.failed``): the handler of a signal that arrived while gloo blocked
    runs late, and must not interrupt the profiler writing the partial trace."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame) -> None:
        if not run.failed:
            raise Stopped("stopped by SIGTERM (the run failed or timed out elsewhere)")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_steps(
    config: ProfileConfig,
    rank: int,
    rep: Reporter,
    train_step: Callable[[int], float],
    use_cuda: bool,
) -> tuple[list[float], list[float]]:
    """Warm-up steps, then the profiled steps; returns (warm-up walls, profiled walls) in s.

    ``train_step(step)`` runs training step ``step`` (counting warm-up steps from 0) and returns
    its wall time. The trace is written as described in the module docstring.
    """
    warmup_wall: list[float] = []
    for i in range(config.warmup_steps):
        rep.phase("warmup", step=i)
        wall = train_step(i)
        warmup_wall.append(wall)
        rep.step_done(i, False, wall)

    run = RankRun(config, rank)
    activities = [ProfilerActivity.CPU]
    if use_cuda:
        activities.append(ProfilerActivity.CUDA)
    prof_schedule = (schedule(wait=0, warmup=0, active=config.steps, repeat=1)
                     if config.step_marks else None)
    step_wall: list[float] = []
    with stop_on_sigterm(run), profile(
        activities=activities,
        schedule=prof_schedule,
        on_trace_ready=run.on_trace_ready,
        profile_memory=config.profile_memory,
        record_shapes=config.record_shapes,
    ) as prof:
        try:
            for i in range(config.steps):
                step = config.warmup_steps + i
                rep.phase("profile", step=step)
                # Said *before* the step runs: however the rank stops (exception, SIGTERM),
                # its partial trace names the step that was cut; cleared once all are done.
                prof.add_metadata_json(INCOMPLETE_STEP_KEY, json.dumps(i))
                wall = train_step(step)
                step_wall.append(wall)
                rep.step_done(step, True, wall)
                run.profiled_done = i + 1
                if run.profiled_done == config.steps:
                    prof.add_metadata_json(INCOMPLETE_STEP_KEY, "null")
                if config.step_marks:
                    prof.step()  # closes ProfilerStep#i; after the last one the trace is exported
        except BaseException:
            run.failed = True
            raise
    if run.trace_written is None:  # pragma: no cover - torch always calls on_trace_ready
        raise RuntimeError("torch.profiler did not export a trace")
    return warmup_wall, step_wall

