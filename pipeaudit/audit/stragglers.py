"""Ranks that start their actions late: after their inputs and the rank itself were ready.

An action whose producer ran on a rank without a trace has no known ready time and is not
counted: a rank's figure does not change when another rank's trace is left out."""

from __future__ import annotations

from collections import defaultdict
from functools import lru_cache
from statistics import median

from pipeaudit.actions import Action
from pipeaudit.audit import findings as F
from pipeaudit.audit.deps import producers
from pipeaudit.audit.result import Finding
from pipeaudit.timeline.model import Timeline

US = 1000.0  # ns per µs


@lru_cache(maxsize=65536)
def _producer_keys(act: tuple, S: int) -> tuple[tuple, ...]:
    """:func:`producers` of (stage, kind, microbatch), as such tuples, memoised (an audit asks
    for the same few actions every step)."""
    return tuple((p.stage, p.kind, p.microbatch) for p in producers(Action(*act), S))


def straggler_findings(tl: Timeline, steps, S: int) -> list[Finding]:
    """Per rank, time its actions started after their inputs and the rank were ready
    (``steps``: the audited StepMetrics)."""
    delays: dict[int, float] = defaultdict(float)
    by_step = tl.step_rows(("stage", "kind", "microbatch", "compute_start", "compute_end"))
    stages_present = {int(s) for s in tl.actions["stage"].unique().to_list()}
    for k in (s.step for s in steps):
        ends: dict[tuple, int] = {}  # (stage, kind, microbatch) -> compute end
        rows = []
        for rt, rank_steps in zip(tl.ranks, by_step):
            prev_end = None
            for s, kind, m, cs, ce in rank_steps.get(k, []):
                act = (int(s), str(kind), int(m))
                ends[act] = int(ce)
                rows.append((rt.rank, act, int(cs), prev_end))
                prev_end = int(ce)
        for rank, act, start, prev_end in rows:
            deps = _producer_keys(act, S)
            if any(p[0] not in stages_present for p in deps):
                continue  # the producer's rank has no trace: its ready time is unknown
            ready = [e for e in [prev_end] + [ends.get(p) for p in deps] if e is not None]
            if ready:
                delays[rank] += max(0, start - max(ready)) / US
    if len(delays) < 3:
        return []
    nsteps = max(len(steps), 1)
    per_step = {r: d / nsteps for r, d in delays.items()}
    step_us = sum(s.step_time_us for s in steps) / nsteps
    out = []
    for r, d in per_step.items():
        others = [x for rr, x in per_step.items() if rr != r]
        f = F.straggler(r, d, median(others), step_us)
        if f:
            out.append(f)
    return out
