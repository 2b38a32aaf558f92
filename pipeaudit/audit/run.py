"""Audit a timeline: bubble, replay ideal, theory, overlap, memory, findings."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import replace
from functools import lru_cache
from statistics import median
from typing import Any

import polars as pl

from pipeaudit.actions import Action
from pipeaudit.audit import findings as F
from pipeaudit.audit.deps import producers
from pipeaudit.audit.result import (
    AuditResult, BubbleSummary, Finding, RankMetrics, StageMetrics, StepMetrics,
)
from pipeaudit.audit.windows import mean, windows_and_bubbles
from pipeaudit.errors import ScheduleError
from pipeaudit.schedules import (
    build_schedule, detect_schedule, peak_inflight_of_orders, replay, theory,
)
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
        name, source, detected, sched = _schedule(tl, schedule, P, M, v, pranks, placement, notes)
    findings: list[Finding] = []
    if sched is not None and source in ("declared", "manifest"):
        findings += _order_violations(tl, sched, pranks, steps)

    kind_means = {k: float(acts.filter(pl.col("kind") == k)["compute_ns"].mean() or 0.0) / US
                  for k in ("F", "B", "I", "W")}
    th = _theory(name, sched, P, M, v, kind_means, notes) if name is not None and not sparse else None
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


def _schedule(tl, declared, P, M, v, pranks, placement, notes):
    """(name, source, detected names, catalogue Schedule or None)."""
    rank_index = {r: i for i, r in enumerate(pranks)}
    detected: list[str] = []
    if sorted(placement) == list(range(len(placement))):
        step0 = tl.orders(tl.steps[0])
        orders = [step0.get(r, []) for r in pranks]
        place = [rank_index[placement[s]] for s in range(len(placement))]
        try:
            detected = detect_schedule(orders, place, M)
        except ScheduleError:
            detected = []
    manifest_name = (tl.manifest or {}).get("schedule")
    if declared:
        name, source = declared, "declared"
    elif manifest_name:
        name, source = str(manifest_name), "manifest"
    elif detected:
        name, source = detected[0], "detected"
    else:
        notes.append("schedule not recognised from the action order: no closed-form theory")
        return None, "unknown", detected, None
    try:
        sched = build_schedule(name, P, M, v if v > 1 else None)
    except ScheduleError as exc:
        notes.append(f"schedule {name}: {exc}")
        sched = None
    return name, source, detected, sched


def _theory(name, sched, P, M, v, kind_means, notes):
    """Closed form with measured mean durations; a replay of the catalogue order where none applies."""
    split = kind_means["I"] > 0
    try:
        if split:
            th = theory(name, P, M, v, t_f=kind_means["F"] or 1.0, t_i=kind_means["I"],
                        t_w=kind_means["W"])
        else:
            th = theory(name, P, M, v, t_f=kind_means["F"] or 1.0, t_b=kind_means["B"] or 2.0)
    except ScheduleError as exc:
        notes.append(f"no theory for {name} with P={P}, M={M}, v={v}: {exc}")
        return None
    if th.bubble is None and sched is not None:
        means = {k: kind_means[k] or kind_means["F"] or 1.0 for k in kind_means}
        if not split:
            means["I"], means["W"] = means["B"] / 2, means["B"] / 2
        sim = replay(sched.orders, sched.placement, {(st, k): means[k]
                                                     for st in range(sched.num_stages) for k in means})
        notes.append(f"theory: {th.notes}")
        notes.append(f"theory: the closed form {th.formula} does not hold for the measured "
                     f"durations; the theory figure replays the catalogue {sched.name} order with "
                     "each kind's mean measured duration and free communication")
        th = replace(th, bubble=sim.bubble, formula=f"replay({sched.name}, mean T)")
    return th


def _order_violations(tl: Timeline, sched, pranks: list[int], steps: list[int]) -> list[Finding]:
    out = []
    for k in steps[:1]:
        orders = tl.orders(k)
        for i, r in enumerate(pranks):
            seen = orders.get(r, [])
            want = list(sched.orders[i]) if i < len(sched.orders) else []
            for pos, (a, b) in enumerate(zip(seen, want)):
                if a != b:
                    out.append(F.schedule_violation(sched.name, r, pos, str(a), str(b)))
                    break
    return out


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
    out += _completeness(tl, stages, wb)
    out += _stragglers(tl, wb, S)
    return out


def _completeness(tl: Timeline, stages, wb) -> list[Finding]:
    """Each microbatch needs one F and one backward (a B, or an I with its W) per stage and step."""
    acts = tl.actions
    M = int(acts["microbatch"].max()) + 1
    out = []
    for st in stages:
        a = acts.filter(pl.col("stage") == st.stage)
        has_w = st.actions["W"] > 0
        per_step: dict[int, list[tuple]] = {}
        for k, kind, m in a.select("step", "kind", "microbatch").iter_rows():
            per_step.setdefault(k, []).append((kind, int(m)))
        for k in sorted(wb):
            c = Counter(per_step.get(k, []))
            missing, dups = [], []
            for m in range(M):
                if c[("F", m)] == 0:
                    missing.append(f"{st.stage}F{m}")
                if c[("B", m)] + c[("I", m)] == 0:
                    missing.append(f"{st.stage}B{m}")
                if has_w and c[("I", m)] and not c[("W", m)]:
                    missing.append(f"{st.stage}W{m}")
            dups = sorted(f"{st.stage}{kind}{m}" for (kind, m), n in c.items() if n > 1)
            if missing:
                out.append(F.missing_actions(st.stage, st.rank, k, missing))
            if dups:
                out.append(F.duplicated_actions(st.stage, st.rank, k, dups))
    return out


@lru_cache(maxsize=65536)
def _producer_keys(act: tuple, S: int) -> tuple[tuple, ...]:
    """:func:`producers` of (stage, kind, microbatch), as such tuples, memoised (an audit asks
    for the same few actions every step)."""
    return tuple((p.stage, p.kind, p.microbatch) for p in producers(Action(*act), S))


def _stragglers(tl: Timeline, wb, S: int) -> list[Finding]:
    """Per rank, time its actions started after their inputs and the rank were ready."""
    delays: dict[int, float] = defaultdict(float)
    by_step = tl.step_rows(("stage", "kind", "microbatch", "compute_start", "compute_end"))
    for k in wb:
        ends: dict[tuple, int] = {}  # (stage, kind, microbatch) -> compute end
        rows = []
        for rt, steps in zip(tl.ranks, by_step):
            prev_end = None
            for s, kind, m, cs, ce in steps.get(k, []):
                act = (int(s), str(kind), int(m))
                ends[act] = int(ce)
                rows.append((rt.rank, act, int(cs), prev_end))
                prev_end = int(ce)
        for rank, act, start, prev_end in rows:
            ready = [e for e in [prev_end] + [ends.get(p) for p in _producer_keys(act, S)] if e is not None]
            if ready:
                delays[rank] += max(0, start - max(ready)) / US
    if len(delays) < 3:
        return []
    nsteps = max(len(wb), 1)
    per_step = {r: d / nsteps for r, d in delays.items()}
    step_us = sum(w[1] - w[0] for w, _, _ in wb.values()) / US / nsteps
    out = []
    for r, d in per_step.items():
        others = [x for rr, x in per_step.items() if rr != r]
        f = F.straggler(r, d, median(others), step_us)
        if f:
            out.append(f)
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
