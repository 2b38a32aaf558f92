"""Small facts about a timeline and a replica's audit that the run and the job both report."""

from __future__ import annotations

from statistics import median

from pipeaudit.audit.pipeline import PipelineAudit
from pipeaudit.audit.result import PipelineSummary
from pipeaudit.audit.windows import mean
from pipeaudit.timeline.layout import Layout
from pipeaudit.timeline.model import Timeline


def summary_of(pa: PipelineAudit, layout: Layout) -> PipelineSummary:
    """The replica's line in ``AuditResult.pipelines``."""
    present = {rt.rank for rt in pa.tl.ranks}
    ranks = layout.replica_ranks(pa.replica)
    times = sorted(s.step_time_us for s in pa.steps)
    nsteps = max(len(pa.steps), 1)
    per_stage = {st.stage: sum(st.compute_us.values()) / nsteps for st in pa.stages}
    slowest = max(per_stage, key=per_stage.get) if per_stage else None  # type: ignore[arg-type]
    return PipelineSummary(
        pipeline=pa.replica, ranks=ranks, ranks_missing=[r for r in ranks if r not in present],
        bubble=pa.bubble.measured, replay_ideal=pa.bubble.replay_ideal,
        step_time_us=float(median(times)) if times else None, slowest_stage=slowest,
        slowest_stage_compute_us=per_stage.get(slowest) if slowest is not None else None)


def inference_coverage(tl: Timeline) -> float | None:
    """Mean over the ranks with inferred actions of the share of their compute in an action."""
    return mean(rt.coverage for rt in tl.ranks if rt.source == "inferred")


def device_of(tl: Timeline) -> str:
    types = {r.device_type for r in tl.ranks}
    return types.pop() if len(types) == 1 else "mixed"
