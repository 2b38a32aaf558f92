"""Audit a timeline: every pipeline replica of the job, then the job.

Each replica (:mod:`pipeaudit.audit.pipeline`) gets its own step windows, bubbles, replay
ideal and theory. With one replica the result is that replica's; with several, the job's
figures combine them (:mod:`pipeaudit.audit.job`): the bubble is the mean over every rank,
a step lasts as long as its slowest replica, and findings name the replica, stage or rank
that held the job back.
"""

from __future__ import annotations

from statistics import median

from pipeaudit.audit import findings as F
from pipeaudit.audit.completeness import completeness_findings
from pipeaudit.audit.job import combine_replicas, replica_findings
from pipeaudit.audit.per_step import combine_series
from pipeaudit.audit.pipeline import PipelineAudit, audit_pipeline
from pipeaudit.audit.result import AuditResult, BubbleSummary, Finding
from pipeaudit.audit.summary import device_of, inference_coverage, summary_of
from pipeaudit.audit.schedule_fit import order_violations
from pipeaudit.audit.stragglers import straggler_findings
from pipeaudit.timeline.invariants import Doubt
from pipeaudit.timeline.layout import Layout
from pipeaudit.timeline.model import Timeline

US = 1000.0  # ns per µs
_SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


def audit(tl: Timeline, *, schedule: str | None = None) -> AuditResult:
    """Measure everything docs/metrics.md defines on ``tl``; ``schedule`` declares the schedule run."""
    notes = list(tl.warnings)
    layout = tl.layout or _one_pipeline(tl)
    present = sorted(rt.rank for rt in tl.ranks)
    pipes: list[PipelineAudit] = []
    findings: list[Finding] = []
    for d in range(len(layout.replicas)):
        sub = tl.subset(layout.replica_ranks(d), layout)
        positions = {r: p for p, peers in enumerate(layout.replicas[d]) for r in peers}
        pa = audit_pipeline(sub, replica=d, positions=positions, P=layout.pp, schedule=schedule,
                            num_stages=_manifest_stages(tl))
        if pa is None:
            continue
        pipes.append(pa)
        findings += _pipeline_findings(pa)
        if pa.tl is not tl:  # what was derived from the replica's tables is read: let it go
            pa.tl.forget_derived()  # (16 replicas of 64 stages: about 30 MB held to the end)
    if not pipes:
        return _no_pipeline(tl, notes, layout)
    for pa in pipes:
        notes.extend(n if len(pipes) == 1 else f"pipeline {pa.replica}: {n}" for n in pa.notes
                     if n not in notes)
    outside = sorted(set(present) - set(layout.ranks))
    if outside:
        notes.append(f"ranks {outside} are in no pipeline of the layout ({layout.describe()}) and "
                     "were not audited")

    if len(pipes) == 1:
        result = _single(pipes[0], tl, layout, notes)
        result.per_step = pipes[0].per_step
    else:
        result = combine_replicas(pipes, tl, layout, notes)
        findings += replica_findings(pipes, result)
        parts = [pa.per_step for pa in pipes if pa.per_step is not None]
        result.per_step = combine_series(parts) if parts else None
    findings += _job_findings(result, pipes)
    if not tl.doubts and result.schedule is None:
        tl.doubts = ([d for pa in pipes for d in pa.doubts]
                     or _partial_reading_doubts(tl, layout, present))
        if tl.doubts:  # the missing actions are the reading's, not the run's
            findings = [f for f in findings
                        if f.code not in ("MISSING_ACTIONS", "DUPLICATED_ACTIONS")]
            result.schedule_source = "uncertain"
    result.conservation = [rt.account.to_dict(rt.rank) for rt in sorted(tl.ranks, key=lambda x: x.rank)
                           if rt.source == "inferred" and rt.account is not None]
    if tl.doubts:
        result.uncertain = [d.to_dict() for d in tl.doubts]
        result.num_microbatches = None
        findings.append(F.reading_uncertain(tl.doubts))
    findings += [F.truncated_trace(rep) for rep in tl.salvage]
    findings += _missing_ranks(layout, present)
    findings.sort(key=lambda f: (_SEVERITY_ORDER.get(f.severity, 3), f.code, f.rank or 0, f.stage or 0))
    result.findings = findings
    if tl.clock is not None and tl.clock.offsets_ns:
        result.clock = tl.clock.to_dict()
    return result


def _pipeline_findings(pa: PipelineAudit) -> list[Finding]:
    """What one pipeline replica's audit finds in its own timeline."""
    findings: list[Finding] = []
    # detected: from a later step when the first step's order differs (choose_schedule)
    if pa.sched is not None and pa.schedule_source in ("declared", "manifest", "detected"):
        findings += order_violations(pa.tl, pa.sched, pa.representatives, sorted(pa.windows)
                                     or [s.step for s in pa.steps])
    if not pa.tl.doubts:  # a doubtful reading's missing actions are the reading's, not the run's
        findings += completeness_findings(pa.tl, pa.stages, [s.step for s in pa.steps])
    findings += straggler_findings(pa.tl, pa.steps, pa.S)
    findings += _memory_findings(pa)
    findings += _silent_ranks(pa)
    return findings


def _one_pipeline(tl: Timeline) -> Layout:
    ranks = sorted(rt.rank for rt in tl.ranks)
    return Layout(len(ranks), 1, 1, (tuple((r,) for r in ranks),), "ranks given")


def _manifest_stages(tl: Timeline) -> int | None:
    s = (tl.manifest or {}).get("num_stages")
    return s if isinstance(s, int) and not isinstance(s, bool) and s >= 1 else None


def _single(pa: PipelineAudit, tl: Timeline, layout: Layout, notes: list[str]) -> AuditResult:
    present = sorted(rt.rank for rt in tl.ranks)
    return AuditResult(
        schedule=pa.schedule, schedule_source=pa.schedule_source, detected_schedules=pa.detected,
        num_ranks=pa.P, num_stages=pa.S, num_microbatches=pa.M, num_chunks=pa.v,
        num_steps=len(pa.steps), actions_inferred=tl.action_source in ("inferred", "mixed"),
        action_source=tl.action_source, pipeline_found=True, device_type=device_of(tl),
        ranks=pa.ranks, stages=pa.stages, steps=pa.steps, bubble=pa.bubble, findings=[],
        inputs=tl.inputs, notes=notes, manifest=tl.manifest,
        salvage=[rep.to_dict() for rep in tl.salvage], layout=layout.to_dict(),
        pipelines=[summary_of(pa, layout)], ranks_present=present,
        ranks_missing=[r for r in layout.ranks if r not in set(present)],
        step_evidence=tl.step_evidence, inference_coverage=inference_coverage(tl),
    )


def _memory_findings(pa: PipelineAudit) -> list[Finding]:
    out = []
    for st in pa.stages:
        if st.expected_peak_inflight is not None:
            f = F.memory_above_theory(st.stage, st.rank, st.peak_inflight, st.expected_peak_inflight)
            if f:
                out.append(f)
    return out


def _silent_ranks(pa: PipelineAudit) -> list[Finding]:
    """Ranks of the pipeline whose trace is there but whose actions could not be found."""
    return [F.no_actions(rt.rank, pa.positions.get(rt.rank), rt.source)
            for rt in pa.tl.ranks if rt.actions.height == 0]


def _job_findings(result: AuditResult, pipes: list[PipelineAudit]) -> list[Finding]:
    """Bubble against theory and the replay, stage imbalance, overhead outliers."""
    out: list[Finding] = []
    summary = result.bubble
    complete = all(pa.complete for pa in pipes)
    shared = pipes[0].tl.shared_device if pipes else None
    if complete and summary.measured is not None and summary.theory is not None:
        f = F.bubble_above_theory(summary.measured, summary.theory, summary.theory_formula or "",
                                  summary.replay_ideal, shared)
        if f:
            out.append(f)
    per_stage: dict[int, list[float]] = {}
    for pa in pipes:
        nsteps = max(len(pa.steps), 1)
        for st in pa.stages:
            per_stage.setdefault(st.stage, []).append(sum(st.compute_us.values()) / nsteps)
    stage_rank = {st.stage: st.rank for st in pipes[0].stages}
    means = {s: sum(v) / len(v) for s, v in per_stage.items()}
    if len(means) > 1:
        med = median(means.values())
        for s, v in sorted(means.items()):
            f = F.stage_imbalance(s, stage_rank.get(s, -1), v, med)
            if f:
                out.append(f)
    gaps = {r.rank: r.bubble - r.replay_bubble for r in result.ranks
            if r.bubble is not None and r.replay_bubble is not None}
    if gaps:
        f = F.overhead_pipeline(summary.measured, summary.replay_ideal, max(gaps, key=gaps.get),
                                shared)
        if f:
            out.append(f)
        med = median(gaps.values())
        for rank, gap in gaps.items():
            # on a shared device a stage's gap is its share of the device's waits, heavier
            # stages more: no rank of its own to blame
            if shared is None and len(gaps) > 2 and gap > F.OUTLIER_FACTOR * max(med, F.OVERHEAD_WARN):
                out.append(F.overhead(rank, gap, med))
    return out


def _partial_reading_doubts(tl: Timeline, layout: Layout, present: list[int]) -> list[Doubt]:
    """Doubts about a reading from the ops of only some of the job's ranks whose order fits no
    schedule: a rank's file alone does not show how many stages it holds (a V's last rank sends
    its second stage's activations after a backward, and they read as gradients)."""
    world = layout.world_size if layout.world_size is not None else len(layout.ranks)
    guessed = [rt for rt in tl.ranks if rt.actions.height]
    if (world is None or len(set(present)) >= world or not guessed
            or any(rt.source != "inferred" for rt in guessed)):
        return []
    return [Doubt(rt.rank, "its order of forwards and backwards fits no schedule at its stage "
                  "position, and the other ranks' traces, which show how many stages a rank "
                  "holds, are missing") for rt in sorted(guessed, key=lambda r: r.rank)]


def _missing_ranks(layout: Layout, present: list[int]) -> list[Finding]:
    """MISSING_RANKS when the job's ranks (world size, else the layout) exceed the ranks given."""
    world = layout.world_size if layout.world_size is not None else len(layout.ranks)
    if world is None or len(set(present)) >= world:
        return []
    return [F.missing_ranks(present, world)]


def _no_pipeline(tl: Timeline, notes: list[str], layout: Layout) -> AuditResult:
    from pipeaudit.audit.pipeline import _rank_metrics

    notes.append("no pipeline actions found: per-rank busy, idle and communication only")
    ranks = [_rank_metrics(rt, [], {}, {}, {}, {}, {}, "", None) for rt in tl.ranks]
    present = sorted(rt.rank for rt in tl.ranks)
    return AuditResult(
        schedule=None, schedule_source="unknown", detected_schedules=[], num_ranks=len(tl.ranks),
        num_stages=0, num_microbatches=0, num_chunks=0, num_steps=0, actions_inferred=False,
        action_source="none", pipeline_found=False, device_type=device_of(tl), ranks=ranks,
        stages=[], steps=[], bubble=BubbleSummary(None, None, None, None, None, None, None),
        findings=[F.truncated_trace(rep) for rep in tl.salvage] + [
            Finding("NO_PIPELINE", "info", None, None, None, None,
                    "No pipeline actions (PP:, Forward/Backward, or inferable F/B) were found: "
                    "the figures are per-rank busy, idle and communication time only.")],
        inputs=tl.inputs, notes=notes, manifest=tl.manifest,
        salvage=[rep.to_dict() for rep in tl.salvage], layout=layout.to_dict(),
        ranks_present=present, step_evidence=tl.step_evidence,
    )

