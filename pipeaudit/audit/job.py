"""The job across its pipeline replicas (data parallel × pipeline × tensor parallel).

Every replica runs the same schedule on different data. The data-parallel gradient sync
after the last backward makes every replica wait for the slowest, so:

- the job's step k lasts as long as its slowest replica's step window (and starts at the
  earliest replica's);
- the job's bubble is the mean over every rank of every replica (each in its own replica's
  window), its replay ideal the mean of the replicas';
- the replica that held the job back is named with its slowest stage, and the spread between
  replicas is (slowest - fastest) / fastest step time;
- a rank is compared with its peers: the ranks that run the same stage (and the same
  tensor-parallel index) in the other replicas, the same work on other hardware.
"""

from __future__ import annotations

from statistics import median
from typing import Any

from pipeaudit.audit import findings as F
from pipeaudit.audit.breakdown import RankComm
from pipeaudit.audit.pipeline import PipelineAudit
from pipeaudit.audit.result import AuditResult, BubbleSummary, Finding, StepMetrics
from pipeaudit.audit.summary import device_of, inference_coverage, summary_of
from pipeaudit.audit.windows import mean
from pipeaudit.timeline.layout import Layout
from pipeaudit.timeline.model import Timeline

#: A replica whose median step is this much longer than the median replica's held the job back.
REPLICA_SLOW_FACTOR = 1.05
#: A rank whose compute per step is this much above its peers' median is slower than them.
PEER_SLOW_FACTOR = 1.15


def combine_replicas(pipes: list[PipelineAudit], tl: Timeline, layout: Layout,
                     notes: list[str]) -> AuditResult:
    """One AuditResult for the job from its replicas' audits."""
    ref = next((pa for pa in pipes if pa.complete), pipes[0])
    names = {pa.schedule for pa in pipes}
    if len(names) > 1:
        notes.append(f"the pipeline replicas were matched to different schedules "
                     f"({', '.join(sorted(str(n) for n in names))}); the job is reported against "
                     f"pipeline {ref.replica}'s ({ref.schedule})")
    ranks = sorted((r for pa in pipes for r in pa.ranks), key=lambda r: r.rank)
    _dp_waits(pipes, layout, {r.rank: r for r in ranks})
    stages = [st for pa in pipes for st in pa.stages]
    steps = _job_steps(pipes)
    measured = mean(r.bubble for r in ranks if r.bubble is not None)
    ideals = [pa.bubble.replay_ideal for pa in pipes if pa.bubble.replay_ideal is not None]
    ideal = sum(ideals) / len(ideals) if len(ideals) == len(pipes) else None
    th = ref.bubble.theory
    bubble = BubbleSummary(
        measured=measured, theory=th, theory_formula=ref.bubble.theory_formula,
        theory_notes=ref.bubble.theory_notes, replay_ideal=ideal,
        imbalance_part=(ideal - th) if ideal is not None and th is not None else None,
        overhead_part=(measured - ideal) if ideal is not None and measured is not None else None,
        ratio=ref.bubble.ratio, ratio_formula=ref.bubble.ratio_formula,
        scope=ref.bubble.scope if all(pa.complete for pa in pipes) else "own window",
        published=ref.bubble.published,
    )
    summaries = [summary_of(pa, layout) for pa in pipes]
    present = sorted(rt.rank for rt in tl.ranks)
    return AuditResult(
        schedule=ref.schedule, schedule_source=ref.schedule_source, detected_schedules=ref.detected,
        num_ranks=ref.P, num_stages=ref.S, num_microbatches=ref.M, num_chunks=ref.v,
        num_steps=len(steps), actions_inferred=tl.action_source in ("inferred", "mixed"),
        action_source=tl.action_source, pipeline_found=True, device_type=device_of(tl),
        ranks=ranks, stages=stages, steps=steps, bubble=bubble, findings=[], inputs=tl.inputs,
        notes=notes, manifest=tl.manifest, salvage=[rep.to_dict() for rep in tl.salvage],
        layout=layout.to_dict(), pipelines=summaries, ranks_present=present,
        ranks_missing=[r for r in layout.ranks if r not in set(present)],
        step_evidence=tl.step_evidence, inference_coverage=inference_coverage(tl),
        job=_job_figures(pipes, summaries, steps),
    )


def _job_steps(pipes: list[PipelineAudit]) -> list[StepMetrics]:
    """Step k of the job: from the earliest replica's start, as long as the slowest replica."""
    by_step: dict[int, list[tuple[StepMetrics, int]]] = {}
    for pa in pipes:
        for s in pa.steps:
            by_step.setdefault(s.step, []).append((s, len(pa.ranks)))
    out = []
    for k in sorted(by_step):
        rows = by_step[k]
        replay_times = [s.replay_step_time_us for s, _ in rows]
        replays = [s.replay_ideal for s, _ in rows]
        out.append(StepMetrics(
            step=k, profiler_step=rows[0][0].profiler_step,
            start_us=min(s.start_us for s, _ in rows),
            step_time_us=max(s.step_time_us for s, _ in rows),
            bubble=sum(s.bubble * n for s, n in rows) / max(sum(n for _, n in rows), 1),
            replay_ideal=(sum(replays) / len(replays)) if None not in replays else None,  # type: ignore[arg-type]
            replay_step_time_us=max(replay_times) if None not in replay_times else None,  # type: ignore[type-var]
        ))
    return out


def _dp_waits(pipes: list[PipelineAudit], layout: Layout, metrics: dict) -> None:
    """Each rank's time in data-parallel collectives waiting for its slowest peer: the i-th
    collective of a step on each peer (same stage position and TP index, other replicas)
    cannot finish before the last peer starts it; per step mean into ``dp_wait_us``."""
    tp = layout.tp > 1
    starts: dict[int, dict[int, list[tuple[int, int]]]] = {}  # rank -> step -> [(start, end)]
    for pa in pipes:
        steps = sorted(pa.windows)
        for rt in pa.tl.ranks:
            comm = RankComm(rt, tp=tp)
            for i, k in enumerate(steps):
                nxt = pa.windows[steps[i + 1]][0] if i + 1 < len(steps) else None
                s0, e0 = comm.dp_in(pa.windows[k][0], nxt)
                starts.setdefault(rt.rank, {})[k] = list(zip(s0.tolist(), e0.tolist()))
    lasts: dict[tuple[int, int], tuple[int, dict[int, list[int]]]] = {}  # (pos, tp) -> group's
    for rep in layout.replicas:
        for pos, peers in enumerate(rep):
            for t, rank in enumerate(peers):
                if rank not in starts:
                    continue
                if (pos, t) not in lasts:  # once per group: linear in ranks, not ranks x replicas
                    group = [other[pos][t] for other in layout.replicas if other[pos][t] in starts]
                    lasts[(pos, t)] = (len(group), _last_starts(starts, group))
                size, last = lasts[(pos, t)]
                if size < 2:
                    continue
                waits = []
                for k, mine in starts[rank].items():
                    wait = 0
                    for (s0, e0), latest in zip(mine, last[k]):
                        wait += min(max(latest - s0, 0), e0 - s0)
                    waits.append(wait)
                if rank in metrics and waits:
                    metrics[rank].dp_wait_us = sum(waits) / len(waits) / 1000.0


def _last_starts(starts: dict[int, dict[int, list[tuple[int, int]]]],
                 group: list[int]) -> dict[int, list[int]]:
    """Step -> the latest start over ``group`` of each step's i-th collective (over the peers
    that have one)."""
    out: dict[int, list[int]] = {}
    for g in group:
        for k, seq in starts[g].items():
            cur = out.setdefault(k, [])
            for i, (s0, _) in enumerate(seq):
                if i < len(cur):
                    cur[i] = max(cur[i], s0)
                else:
                    cur.append(s0)
    return out


def _job_figures(pipes: list[PipelineAudit], summaries, steps: list[StepMetrics]) -> dict[str, Any]:
    times = {s.pipeline: s.step_time_us for s in summaries if s.step_time_us is not None}
    slowest = max(times, key=times.get) if times else None  # type: ignore[arg-type]
    fastest = min(times.values()) if times else None
    job_times = sorted(s.step_time_us for s in steps)
    by_pipe = {s.pipeline: s for s in summaries}
    ranks = [r for pa in pipes for r in pa.ranks if r.breakdown]
    keys = ("span_us", "compute_us", "bubble_us", "exposed_p2p_us", "exposed_dp_us", "dp_comm_us")
    breakdown = {k: sum(r.breakdown[k] for r in ranks) / len(ranks) for k in keys} if ranks else None
    waits = [r.dp_wait_us for r in ranks if r.dp_wait_us is not None]
    if breakdown is not None:
        breakdown["dp_wait_us"] = sum(waits) / len(waits) if waits else None
    return {
        "breakdown": breakdown,
        "step_time_us": float(median(job_times)) if job_times else None,
        "pipelines": len(pipes),
        "slowest_pipeline": slowest,
        "slowest_stage": by_pipe[slowest].slowest_stage if slowest is not None else None,
        "spread": ((times[slowest] - fastest) / fastest
                   if slowest is not None and fastest else None),
        "pipeline_step_time_us": {str(k): v for k, v in sorted(times.items())},
    }


def replica_findings(pipes: list[PipelineAudit], result: AuditResult) -> list[Finding]:
    """The replica that held the job back, and ranks slower than their peers."""
    out: list[Finding] = []
    job = result.job or {}
    times = {s.pipeline: s.step_time_us for s in result.pipelines if s.step_time_us is not None}
    slowest = job.get("slowest_pipeline")
    if slowest is not None and len(times) > 1:
        others = [t for d, t in times.items() if d != slowest]
        med = median(others)
        if med > 0 and times[slowest] > REPLICA_SLOW_FACTOR * med:
            summary = next(s for s in result.pipelines if s.pipeline == slowest)
            out.append(F.slow_replica(slowest, summary.slowest_stage, times[slowest], med))
    out += _peer_findings(pipes)
    return out


def _peer_findings(pipes: list[PipelineAudit]) -> list[Finding]:
    """Each rank's compute per step against the median of the ranks at the same stage
    position and TP index in the other replicas."""
    per: dict[tuple[int, int], dict[int, float]] = {}
    for pa in pipes:
        nsteps = max(len(pa.steps), 1)
        layout = pa.tl.layout
        for r in pa.ranks:
            where = layout.position(r.rank) if layout is not None else None
            if where is None or r.compute_us <= 0:
                continue
            per.setdefault((where[1], where[2]), {})[r.rank] = r.compute_us / nsteps
    out = []
    for (pos, _), by_rank in sorted(per.items()):
        if len(by_rank) < 2:
            continue
        for rank, us in sorted(by_rank.items()):
            peers = [v for r, v in by_rank.items() if r != rank]
            med = median(peers)
            if med > 0 and us > PEER_SLOW_FACTOR * med:
                out.append(F.slower_than_peers(rank, pos, us, med, len(peers)))
    return out
