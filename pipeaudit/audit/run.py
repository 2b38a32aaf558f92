"""Audit a timeline: bubble, replay ideal, theory, overlap, memory, findings."""

from __future__ import annotations

from collections import Counter, defaultdict
from statistics import median
from typing import Any

import polars as pl

from pipeaudit.actions import Action
from pipeaudit.audit import findings as F
from pipeaudit.audit.completeness import completeness_findings
from pipeaudit.audit.result import (
    AuditResult, BubbleSummary, Finding, RankMetrics, StageMetrics, StepMetrics,
)
from pipeaudit.audit.schedule_fit import (
    choose_schedule, closed_form_theory, order_violations, published_of,
)
from pipeaudit.audit.stragglers import straggler_findings
from pipeaudit.audit.windows import mean, windows_and_bubbles
from pipeaudit.errors import ScheduleError
from pipeaudit.schedules import peak_inflight_of_orders, replay
from pipeaudit.timeline import intervals as iv
from pipeaudit.timeline.model import Timeline
from pipeaudit.timeline.rank import RankTimeline

US = 1000.0  # ns per µs


def audit(tl: Timeline, *, schedule: str | None = None) -> AuditResult:
    """Measure everything DESIGN.md defines on ``tl``; ``schedule`` declares the schedule run."""
    notes = list(tl.warnings)
    acts = tl.actions
    steps = tl.steps
    wb = windows_and_bubbles(tl.ranks, steps) if acts.height else {}
    if not wb:
        return _no_pipeline(tl, notes)

    placement = tl.placement
    pranks = sorted(set(placement.values()))
    P, S = len(pranks), len(placement)
    v = S // P if S % P == 0 else 1
    first = acts.filter(pl.col("step") == steps[0])
    M = int(first["microbatch"].max()) + 1
    rank_index = {r: i for i, r in enumerate(pranks)}
    contiguous = sorted(placement) == list(range(S))

    # replay ideal per step: observed order, measured compute, free communication
    replays: dict[int, Any] = {}
    if contiguous:
        place = [rank_index[placement[s]] for s in range(S)]
        for k in wb:
            try:
                replays[k] = _replay_step(tl, k, pranks, place)
            except ScheduleError as exc:
                notes.append(f"step {k}: replay of the observed order failed: {exc}")
    else:
        notes.append(f"stages {sorted(placement)} are not 0..{S - 1}: no replay")

    # which schedule ran (not with sparse microbatch numbers such as 0, 1, 9000: the
    # catalogue schedules of M=9001 would take long to build and mean nothing)
    n_mb = first["microbatch"].n_unique()
    sparse = M > 2 * n_mb + 8
    if sparse:
        notes.append(f"microbatch numbers are sparse (up to {M - 1}, {n_mb} distinct in the first "
                     "step): the schedule is not checked, detected or compared with theory")
        name, source, detected, sched = (schedule, "declared", [], None) if schedule else \
            (None, "unknown", [], None)
    else:
        name, source, detected, sched = choose_schedule(tl, schedule, P, M, v, pranks, placement,
                                                        notes)
    findings: list[Finding] = []
    if sched is not None and source in ("declared", "manifest"):
        findings += order_violations(tl, sched, pranks, steps)

    kind_means = {k: float(acts.filter(pl.col("kind") == k)["compute_ns"].mean() or 0.0) / US
                  for k in ("F", "B", "I", "W")}
    th = (closed_form_theory(name, sched, P, M, v, kind_means, notes)
          if name is not None and not sparse else None)
    ranks = [_rank_metrics(rt, wb, replays, rank_index) for rt in tl.ranks]
    pipeline_ranks = [r for r in ranks if r.bubble is not None]
    measured = mean(r.bubble for r in pipeline_ranks)
    ideal = mean(rp.bubble for rp in replays.values()) if replays else None

    expected_inflight = (peak_inflight_of_orders(sched.orders, sched.placement) if sched else None)
    stages = _stage_metrics(tl, placement, steps, expected_inflight, th)
    step_rows = [
        StepMetrics(step=k, profiler_step=_profiler_step(tl, k), start_us=w[0] / US,
                    step_time_us=(w[1] - w[0]) / US, bubble=float(mean(b.values()) or 0.0),
                    replay_ideal=replays[k].bubble if k in replays else None,
                    replay_step_time_us=replays[k].makespan / US if k in replays else None)
        for k, (w, b, _) in sorted(wb.items())
    ]
    th_bubble = th.bubble if th else None
    summary = BubbleSummary(
        measured=measured, theory=th_bubble, theory_formula=th.formula if th else None,
        theory_notes=th.notes if th else None, replay_ideal=ideal,
        imbalance_part=(ideal - th_bubble) if ideal is not None and th_bubble is not None else None,
        overhead_part=(measured - ideal) if ideal is not None and measured is not None else None,
        ratio=th.ratio if th else None, ratio_formula=th.ratio_formula if th else None,
        published=published_of(th),
    )
    findings += _findings(tl, ranks, stages, summary, wb, S)
    findings += [F.truncated_trace(rep) for rep in tl.salvage]
    findings += _missing_ranks(tl)
    sev = {"error": 0, "warning": 1, "info": 2}
    findings.sort(key=lambda f: (sev.get(f.severity, 3), f.code, f.rank or 0, f.stage or 0))
    return AuditResult(
        schedule=name, schedule_source=source, detected_schedules=detected, num_ranks=P,
        num_stages=S, num_microbatches=M, num_chunks=v, num_steps=len(wb),
        actions_inferred=tl.action_source in ("inferred", "mixed"), action_source=tl.action_source,
        pipeline_found=True, device_type=_device(tl), ranks=ranks, stages=stages, steps=step_rows,
        bubble=summary, findings=findings, inputs=tl.inputs, notes=notes, manifest=tl.manifest,
        salvage=[rep.to_dict() for rep in tl.salvage],
    )


def _missing_ranks(tl: Timeline) -> list[Finding]:
    """MISSING_RANKS when the run's world size (traces, else manifest) exceeds the ranks given."""
    world = next((r.world_size for r in tl.ranks if r.world_size is not None), None)
    if world is None and tl.manifest:
        ws = tl.manifest.get("world_size", tl.manifest.get("num_ranks"))
        world = ws if isinstance(ws, int) and not isinstance(ws, bool) and ws >= 1 else None
    given = sorted(r.rank for r in tl.ranks)
    if world is None or len(set(given)) >= world:
        return []
    return [F.missing_ranks(given, world)]


def _device(tl: Timeline) -> str:
    types = {r.device_type for r in tl.ranks}
    return types.pop() if len(types) == 1 else "mixed"


def _profiler_step(tl: Timeline, k: int) -> int | None:
    for rt in tl.ranks:
        p = rt.actions.filter(pl.col("step") == k)["profiler_step"]
        if p.len() and p[0] is not None:
            return int(p[0])
    return None


def _replay_step(tl: Timeline, k: int, pranks: list[int], place: list[int]):
    durations: dict[tuple[int, Action], float] = {}
    orders: list[list[Action]] = []
    by_step = tl.step_rows(("stage", "kind", "microbatch", "compute_ns"))
    index = {x.rank: i for i, x in enumerate(tl.ranks)}
    for r in pranks:
        order = []
        for s, kind, m, c in by_step[index[r]].get(k, []):
            act = Action(int(s), str(kind), int(m))
            order.append(act)
            durations[(len(orders), act)] = float(c)
        orders.append(order)
    return replay(orders, place, lambda rank, act: durations[(rank, act)], 0.0)


def _rank_metrics(rt: RankTimeline, wb, replays, rank_index) -> RankMetrics:
    by_step = [b[rt.rank] for _, b, _ in (wb[k] for k in sorted(wb)) if rt.actions.height]
    compute_all = iv.union(iv.merge(rt.compute["start"].to_numpy(), rt.compute["end"].to_numpy()),
                           rt.other_compute)
    comm = iv.total(rt.comm)
    exposed = iv.total(iv.subtract(rt.comm, compute_all))
    first, last = (rt.activity[0][0], rt.activity[1][-1]) if rt.activity[0].size else (0, 0)
    span = int(last - first)
    busy = iv.total(rt.activity)
    rep = [replays[k].rank_bubble[rank_index[rt.rank]] for k in sorted(replays)
           if rt.rank in rank_index and rt.actions.height]
    stages = sorted(int(s) for s in rt.actions["stage"].unique().to_list())
    return RankMetrics(
        rank=rt.rank, stages=stages, bubble=mean(by_step) if by_step else None,
        bubble_by_step=by_step, replay_bubble=mean(rep) if rep else None,
        idle_fraction=(1.0 - busy / span) if span > 0 else None,
        compute_us=sum(iv.total(c[rt.rank]) for _, _, c in wb.values()) / US if by_step else 0.0,
        window_us=sum(w[1] - w[0] for w, _, _ in wb.values()) / US if by_step else 0.0,
        comm_us=comm / US, exposed_comm_us=exposed / US,
        overlap=(1.0 - exposed / comm) if comm > 0 else None,
        other_compute_us=iv.total(rt.other_compute) / US, span_us=span / US, busy_us=busy / US,
        peak_allocated_bytes=max(rt.memory_peak.values()) if rt.memory_peak else None,
        device_type=rt.device_type, path=rt.path,
    )


def _inflight(order: list[Action]) -> dict[int, int]:
    live: Counter = Counter()
    peak: dict[int, int] = defaultdict(int)
    for a in order:
        if a.kind == "F":
            live[a.stage] += 1
            peak[a.stage] = max(peak[a.stage], live[a.stage])
        elif a.frees_activations:
            live[a.stage] -= 1
    return peak


def _stage_metrics(tl, placement, steps, expected_inflight, th) -> list[StageMetrics]:
    acts = tl.actions
    peaks: dict[int, int] = defaultdict(int)
    for k in steps:
        for order in tl.orders(k).values():
            for s, p in _inflight(order).items():
                peaks[s] = max(peaks[s], p)
    out = []
    for s, r in placement.items():
        a = acts.filter(pl.col("stage") == s)
        counts = {k: int(a.filter(pl.col("kind") == k).height) for k in ("F", "B", "I", "W")}
        comp = {k: float(a.filter(pl.col("kind") == k)["compute_ns"].sum()) / US for k in counts}
        means = {k: (comp[k] / counts[k] if counts[k] else 0.0) for k in counts}
        exp = None
        if expected_inflight is not None:
            exp = expected_inflight.get(s)
        elif th is not None:
            exp = th.peak_inflight.get(s)
        out.append(StageMetrics(stage=s, rank=r, actions=counts, compute_us=comp,
                                mean_compute_us=means, peak_inflight=peaks.get(s, 0),
                                expected_peak_inflight=exp))
    return out


def _findings(tl, ranks, stages, summary, wb, S) -> list[Finding]:
    out: list[Finding] = []
    if summary.measured is not None and summary.theory is not None:
        f = F.bubble_above_theory(summary.measured, summary.theory, summary.theory_formula or "",
                                  summary.replay_ideal)
        if f:
            out.append(f)
    nsteps = max(len(wb), 1)
    per_stage = {st.stage: sum(st.compute_us.values()) / nsteps for st in stages}
    if len(per_stage) > 1:
        med = median(per_stage.values())
        for st in stages:
            f = F.stage_imbalance(st.stage, st.rank, per_stage[st.stage], med)
            if f:
                out.append(f)
    gaps = {r.rank: r.bubble - r.replay_bubble for r in ranks
            if r.bubble is not None and r.replay_bubble is not None}
    if gaps:
        f = F.overhead_pipeline(summary.measured, summary.replay_ideal, max(gaps, key=gaps.get))
        if f:
            out.append(f)
        med = median(gaps.values())
        for rank, gap in gaps.items():
            if len(gaps) > 2 and gap > F.OUTLIER_FACTOR * max(med, F.OVERHEAD_WARN):
                out.append(F.overhead(rank, gap, med))
    for st in stages:
        if st.expected_peak_inflight is not None:
            f = F.memory_above_theory(st.stage, st.rank, st.peak_inflight, st.expected_peak_inflight)
            if f:
                out.append(f)
    out += completeness_findings(tl, stages, wb)
    out += straggler_findings(tl, wb, S)
    return out


def _no_pipeline(tl: Timeline, notes: list[str]) -> AuditResult:
    notes.append("no pipeline actions found: per-rank busy, idle and communication only")
    ranks = [_rank_metrics(rt, {}, {}, {}) for rt in tl.ranks]
    return AuditResult(
        schedule=None, schedule_source="unknown", detected_schedules=[], num_ranks=len(tl.ranks),
        num_stages=0, num_microbatches=0, num_chunks=0, num_steps=0, actions_inferred=False,
        action_source="none", pipeline_found=False, device_type=_device(tl), ranks=ranks,
        stages=[], steps=[], bubble=BubbleSummary(None, None, None, None, None, None, None),
        findings=[F.truncated_trace(rep) for rep in tl.salvage] + [
            Finding("NO_PIPELINE", "info", None, None, None, None,
                    "No pipeline actions (PP:, Forward/Backward, or inferable F/B) were found: "
                    "the figures are per-rank busy, idle and communication time only.")],
        inputs=tl.inputs, notes=notes, manifest=tl.manifest,
        salvage=[rep.to_dict() for rep in tl.salvage],
    )
