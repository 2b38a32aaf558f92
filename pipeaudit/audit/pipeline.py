"""Audit one pipeline replica: windows, bubbles, replay ideal, schedule, theory, stages.

A replica is the ranks that hand activations to each other, stage position by stage position
(:class:`~pipeaudit.timeline.layout.Layout`); a position may hold several tensor-parallel
peers. Schedules, orders and the replay read one representative per position (the first
peer present); bubbles and the per-rank figures cover every rank.

With every position present the step window W_k spans all of them (docs/metrics.md). With ranks
missing there is no pipeline window: each rank's bubble is measured in its own window (its
first to last compute in the step) and labelled a per-rank figure, the replay needs every
rank and is not run, and the schedule is checked on the positions present.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipeaudit.actions import Action
from pipeaudit.audit.breakdown import RankComm, StepShare
from pipeaudit.audit.replay_ideal import ReplayGroup, replay_ideals
from pipeaudit.audit.per_step import replica_series
from pipeaudit.audit.result import (
    BubbleSummary, RankMetrics, StageMetrics, StepMetrics, StepSeries,
)
from pipeaudit.audit.schedule_fit import choose_schedule, closed_form_theory, published_of
from pipeaudit.audit.shared_device import serial_replay, shared_device_theory
from pipeaudit.audit.windows import computes_by_rank, mean, windows_and_bubbles
from pipeaudit.errors import ScheduleError
from pipeaudit.schedules import peak_inflight_of_orders, replay
from pipeaudit.timeline import intervals as iv
from pipeaudit.timeline.columns import B_CODE, F_CODE, I_CODE, KIND_CODE, NO_STEP
from pipeaudit.timeline.invariants import Doubt
from pipeaudit.timeline.model import Timeline
from pipeaudit.timeline.recv_facts import RecvFacts, recv_facts
from pipeaudit.timeline.rank import RankTimeline

US = 1000.0  # ns per µs
#: ``RankMetrics.bubble_scope`` values.
STEP_WINDOW, OWN_WINDOW = "step window", "own window"


@dataclass
class PipelineAudit:
    """What one replica's audit found (the job combines them into an AuditResult)."""

    replica: int
    tl: Timeline  #: the replica's ranks present
    positions: dict[int, int]  #: rank -> stage position
    representatives: list[int | None]  #: per position, the rank read for orders (None: missing)
    P: int
    S: int
    M: int
    v: int
    ranks: list[RankMetrics]
    stages: list[StageMetrics]
    steps: list[StepMetrics]
    windows: dict[int, tuple[int, int]]  #: step -> W_k (ns); empty with ranks missing
    bubble: BubbleSummary
    schedule: str | None
    schedule_source: str
    detected: list[str]
    sched: Any  #: the catalogue Schedule or None
    theory: Any  #: the Theory or None
    replays: dict[int, Any]
    kind_means: dict[str, float]
    complete: bool
    sparse: bool
    notes: list[str] = field(default_factory=list)
    per_step: StepSeries | None = None  #: the replica's per-step series
    #: why the schedule cannot be told from these ranks' inferred actions (none: it can)
    doubts: list[Doubt] = field(default_factory=list)

    @property
    def missing_positions(self) -> list[int]:
        return [p for p, r in enumerate(self.representatives) if r is None]


def audit_pipeline(tl: Timeline, *, replica: int, positions: dict[int, int], P: int,
                   schedule: str | None, num_stages: int | None = None) -> PipelineAudit | None:
    """Audit the ranks of one replica (``tl`` holds only them); None when none has actions."""
    arr = tl.action_arrays()
    if arr.size == 0:
        return None
    notes: list[str] = []
    representatives: list[int | None] = [None] * P
    for rt in sorted(tl.ranks, key=lambda r: r.rank):
        p = positions.get(rt.rank)
        if p is not None and p < P and representatives[p] is None and rt.actions.height:
            representatives[p] = rt.rank
    complete = all(r is not None for r in representatives)
    reps = [r for r in representatives if r is not None]
    rep_tl = _subset(tl, reps)
    steps = rep_tl.steps or tl.steps
    placement = rep_tl.placement  # stage -> representative rank
    stage_pos = {s: positions[r] for s, r in placement.items()}
    rep_arr = rep_tl.action_arrays()
    per_rank_stages = max((len(rep_arr.rank_stages(i)) for i in range(len(rep_tl.ranks))), default=1)
    S = num_stages if num_stages else max(len(placement), P * per_rank_stages)
    v = S // P if S % P == 0 else 1
    first = arr.microbatch[arr.step == steps[0]]
    M = int(first.max()) + 1
    n_mb = int(np.unique(first).size)
    sparse = M > 2 * n_mb + 8

    if complete:
        wb = windows_and_bubbles(tl.ranks, steps)
        windows = {k: w for k, (w, _, _) in wb.items()}
        bubbles = {k: b for k, (_, b, _) in wb.items()}
        computes = {k: c for k, (_, _, c) in wb.items()}
    else:
        windows, bubbles, computes = {}, *_own_windows(tl.ranks, steps)
        missing = [p for p, r in enumerate(representatives) if r is None]
        notes.append(f"stage positions {missing} of {P} have no trace: each rank's bubble is "
                     "measured in its own window (its first to last compute in a step), a "
                     "per-rank figure; the step window, the replay and the pipeline bubble need "
                     "every rank")
    audited_steps = sorted(bubbles)
    if not audited_steps:
        return None  # actions, but no step in which any of them computes: no pipeline to audit

    doubtful = bool(tl.doubts)  # the reading broke the structure every schedule has
    doubts: list[Doubt] = []
    if doubtful:
        name, source, detected, sched = None, "uncertain", [], None
    elif sparse:
        notes.append(f"microbatch numbers are sparse (up to {M - 1}, {n_mb} distinct in the first "
                     "step): the schedule is not checked, detected or compared with theory")
        name, source, detected, sched = (schedule, "declared", [], None) if schedule else \
            (None, "unknown", [], None)
    else:
        name, source, detected, sched, twins = choose_schedule(
            rep_tl, schedule, P, M, v, representatives, stage_pos, notes, steps)
        if twins:
            doubts = [Doubt(r, f"its order fits {', '.join(detected)}; read with the first "
                            "stage's input gradient as nothing (the first stage has no input to "
                            f"differentiate) it fits {', '.join(twins)} too, and the other stages' "
                            "traces, which show whether backwards are split, are missing")
                      for r in reps]
            name, source, detected, sched = None, "uncertain", [], None
    kind_means = {k: _mean_ns(arr.compute_ns[arr.kind == KIND_CODE[k]]) / US
                  for k in ("F", "B", "I", "W")}
    # replay ideal per step: the observed order, measured compute, free communication; the
    # schedule's overlapped F/B pairs (DualPipeV) run as torch runs them, back to back
    replays: dict[int, Any] = {}
    contiguous = sorted(placement) == list(range(S))
    if complete and contiguous:
        place = [stage_pos[s] for s in range(S)]
        pairs = sched.pairs if sched is not None else frozenset()
        fast = {} if pairs else _fast_replays(rep_tl, audited_steps, representatives, place)
        for k in audited_steps:
            if fast.get(k) is not None:
                replays[k] = fast[k]
                continue
            try:
                replays[k] = _replay_step(rep_tl, k, representatives, place, pairs)  # type: ignore[arg-type]
            except ScheduleError:
                try:
                    replays[k] = _replay_step(rep_tl, k, representatives, place, frozenset())  # type: ignore[arg-type]
                    if pairs:
                        notes.append(f"step {k}: the observed order does not hold {sched.name}'s "
                                     "overlapped pairs; replayed without them")
                except ScheduleError as exc:
                    notes.append(f"step {k}: replay of the observed order failed: {exc}")
    elif complete:
        notes.append(f"stages {sorted(placement)} are not 0..{S - 1}: no replay")

    th = (closed_form_theory(name, sched, P, M, v, kind_means, notes)
          if name is not None and not sparse and not doubtful else None)
    if tl.shared_device is not None:  # the stages take turns on one device
        if complete and contiguous:
            place = [stage_pos[s] for s in range(S)]
            replays = {k: serial_replay(rep_tl, k, reps, place) for k in audited_steps}
        if th is not None:
            th = shared_device_theory(th, P, tl.shared_device, notes)

    index = {r: positions.get(r) for r in (rt.rank for rt in tl.ranks)}
    scope = STEP_WINDOW if complete else OWN_WINDOW
    tp = tl.layout is not None and tl.layout.tp > 1
    facts = tl.recv_facts()
    shares = {rt.rank: step_shares(rt, audited_steps, computes, windows, tp=tp,
                                   waiting=facts[rt.rank].waiting) for rt in tl.ranks}
    ranks = [_rank_metrics(rt, audited_steps, bubbles, computes, windows, replays, index, scope,
                           replica, tp=tp, stages=arr.rank_stages(i), recv=facts[rt.rank],
                           shares=shares[rt.rank])
             for i, rt in enumerate(tl.ranks)]
    measured = mean(r.bubble for r in ranks if r.bubble is not None)
    ideal = mean(rp.bubble for rp in replays.values()) if replays else None
    expected_inflight = peak_inflight_of_orders(sched.orders, sched.placement) if sched else None
    peaks = stage_peaks_by_step(rep_tl, audited_steps)
    stages = _stage_metrics(rep_tl, placement, peaks, expected_inflight, th, replica)
    profiler_steps = _profiler_steps(tl)
    step_rows = [_step_row(k, profiler_steps.get(k), windows.get(k), bubbles[k], computes[k],
                           replays.get(k)) for k in audited_steps]
    series = replica_series(tl, rep_tl, step_rows, bubbles, shares, peaks)
    th_bubble = th.bubble if th else None
    summary = BubbleSummary(
        measured=measured, theory=th_bubble, theory_formula=th.formula if th else None,
        theory_notes=th.notes if th else None, replay_ideal=ideal,
        imbalance_part=(ideal - th_bubble) if ideal is not None and th_bubble is not None else None,
        overhead_part=(measured - ideal) if ideal is not None and measured is not None else None,
        ratio=th.ratio if th else None, ratio_formula=th.ratio_formula if th else None,
        scope=scope, published=published_of(th),
    )
    return PipelineAudit(replica, tl, positions, representatives, P, S, M, v, ranks, stages,
                         step_rows, windows, summary, name, source, detected, sched, th, replays,
                         kind_means, complete, sparse, notes, series, doubts)


def _subset(tl: Timeline, ranks: list[int]) -> Timeline:
    """The timeline of some of ``tl``'s ranks (same run facts)."""
    return tl.subset(ranks)


def _own_windows(ranks: list[RankTimeline], steps: list[int]):
    """Per step, each rank's bubble in its own window and its compute set."""
    bubbles: dict[int, dict[int, float]] = {}
    computes: dict[int, dict[int, iv.Intervals]] = {}
    by_rank = computes_by_rank(ranks, steps)
    for k in steps:
        for rt in ranks:
            c = by_rank[rt.rank][k]
            if c[0].size == 0:
                continue
            lo, hi = int(c[0][0]), int(c[1][-1])
            bubbles.setdefault(k, {})[rt.rank] = 1.0 - iv.total(c) / (hi - lo) if hi > lo else 0.0
            computes.setdefault(k, {})[rt.rank] = c
    return bubbles, computes


def _step_row(k: int, profiler_step: int | None, window, bubbles: dict[int, float], computes,
              rp) -> StepMetrics:
    if window is None:  # ranks missing: the span of the ranks' own windows
        lo = min(int(c[0][0]) for c in computes.values() if c[0].size)
        hi = max(int(c[1][-1]) for c in computes.values() if c[1].size)
        window = (lo, hi)
    return StepMetrics(step=k, profiler_step=profiler_step, start_us=window[0] / US,
                       step_time_us=(window[1] - window[0]) / US,
                       bubble=float(mean(bubbles.values()) or 0.0),
                       replay_ideal=rp.bubble if rp is not None else None,
                       replay_step_time_us=rp.makespan / US if rp is not None else None)


def _profiler_steps(tl: Timeline) -> dict[int, int]:
    """Step -> its ProfilerStep number: that of the step's first action (in the rank's table
    order) on the first rank (in the timeline's order) whose first action of the step has one."""
    arr = tl.action_arrays()
    out: dict[int, int] = {}
    decided: set[int] = set()
    for (i, k), (lo, hi) in sorted(arr.groups.items()):
        if k in decided or k == NO_STEP:
            continue
        first = lo + int(np.argmin(arr.row[lo:hi]))
        p = int(arr.profiler_step[first])
        if p != NO_STEP:
            out[k] = p
            decided.add(k)
    return out


def _mean_ns(values: np.ndarray) -> float:
    """Mean of integer ns values (0.0 for none), as polars' ``mean`` gives it."""
    return float(values.sum()) / values.size if values.size else 0.0


def _fast_replays(tl: Timeline, steps: list[int], representatives, place: list[int]) -> dict:
    """Step -> its replay ideal, every step at once (:mod:`pipeaudit.audit.replay_ideal`);
    None where the event loop must answer."""
    index = {x.rank: i for i, x in enumerate(tl.ranks)}
    ranks = tuple(index[r] for r in representatives)
    groups = [ReplayGroup(k, ranks, tuple(place)) for k in steps]
    return dict(zip(steps, replay_ideals(tl.action_arrays(), groups)))


def _replay_step(tl: Timeline, k: int, representatives: list[int], place: list[int], pairs=()):
    arr = tl.action_arrays()
    index = {x.rank: i for i, x in enumerate(tl.ranks)}
    orders: list[list[Action]] = []
    durations: dict[tuple[int, Action], float] = {}
    for r in representatives:
        sl = arr.rows(index[r], k)
        order = arr.order(index[r], k)
        for act, c in zip(order, arr.compute_ns[sl].tolist()):
            durations[(len(orders), act)] = float(c)
        orders.append(order)
    return replay(orders, place, lambda rank, act: durations[(rank, act)], 0.0, pairs=pairs)


def step_shares(rt: RankTimeline, steps: list[int], computes, windows, *, tp: bool,
                waiting: iv.Intervals | None = None) -> dict[int, StepShare]:
    """Step -> the rank's split of that step (:mod:`pipeaudit.audit.breakdown`), for the steps
    in which it computes; ``waiting``: the rank's recv waiting (:func:`waiting_intervals`)."""
    out: dict[int, StepShare] = {}
    comm = RankComm(rt, tp=tp, waiting=waiting)
    for i, k in enumerate(steps):
        c = computes.get(k, {}).get(rt.rank)
        if c is None or c[0].size == 0:
            continue
        w = windows.get(k) or (int(c[0][0]), int(c[1][-1]))
        nxt = steps[i + 1] if i + 1 < len(steps) else None
        nxt_start = None
        if nxt is not None:
            nw = windows.get(nxt)
            nc = computes.get(nxt, {}).get(rt.rank)
            nxt_start = nw[0] if nw else (int(nc[0][0]) if nc is not None and nc[0].size else None)
        out[k] = comm.share(c, w, nxt_start)
    return out


def _breakdown(shares: dict[int, StepShare]) -> dict | None:
    """Mean per step of the rank's step split."""
    total = StepShare()
    for share in shares.values():
        total.add(share)
    return total.per_step(len(shares)) if shares else None


def waiting_intervals(rt: RankTimeline) -> iv.Intervals | None:
    """The parts of the rank's matched recvs spent waiting for the sender."""
    return recv_facts([rt])[rt.rank].waiting


def _rank_metrics(rt: RankTimeline, steps: list[int], bubbles, computes, windows, replays,
                  index: dict[int, int | None], scope: str, replica: int | None,
                  tp: bool = False, stages: list[int] | None = None,
                  recv: RecvFacts | None = None,
                  shares: dict[int, StepShare] | None = None) -> RankMetrics:
    """The rank's figures; ``shares``: its :func:`step_shares` (computed when not given)."""
    by_step = [bubbles[k][rt.rank] for k in steps if rt.rank in bubbles.get(k, {})]
    totals = rt.totals
    comm, exposed, span, busy = totals.comm_ns, totals.exposed_comm_ns, totals.span_ns, totals.busy_ns
    pos = index.get(rt.rank)
    rep = [replays[k].rank_bubble[pos] for k in sorted(replays) if pos is not None and rt.actions.height]
    if stages is None:
        stages = sorted(int(s) for s in rt.actions["stage"].unique().to_list())
    own = [computes[k][rt.rank] for k in steps if rt.rank in computes.get(k, {})]
    recv = recv if recv is not None else recv_facts([rt])[rt.rank]
    if windows:
        window_us = sum(windows[k][1] - windows[k][0] for k in steps if k in windows) / US
    else:
        window_us = sum(int(c[1][-1] - c[0][0]) for c in own if c[0].size) / US
    return RankMetrics(
        rank=rt.rank, stages=stages, bubble=mean(by_step) if by_step else None,
        bubble_by_step=by_step, replay_bubble=mean(rep) if rep else None,
        idle_fraction=(1.0 - busy / span) if span > 0 else None,
        compute_us=sum(iv.total(c) for c in own) / US if by_step else 0.0,
        window_us=window_us if by_step else 0.0,
        comm_us=comm / US, exposed_comm_us=exposed / US,
        overlap=(1.0 - exposed / comm) if comm > 0 else None,
        other_compute_us=totals.other_compute_ns / US, span_us=span / US, busy_us=busy / US,
        peak_allocated_bytes=max(rt.memory_peak.values()) if rt.memory_peak else None,
        device_type=rt.device_type, path=rt.path, pipeline=replica, position=pos,
        bubble_scope=scope if by_step else None,
        breakdown=_breakdown(shares if shares is not None else step_shares(
            rt, steps, computes, windows, tp=tp, waiting=recv.waiting)) if by_step else None,
        recv_wait_us=recv.wait_us, recv_transfer_us=recv.transfer_us, recvs_matched=recv.matched,
        recvs=recv.count,
    )


def stage_peaks_by_step(tl: Timeline, steps: list[int]) -> dict[int, dict[int, int]]:
    """Step -> stage -> the most microbatches in flight (F done, its B or I not yet) along
    any rank's order of that step: every order counted at once."""
    a = tl.action_arrays()
    sel = np.flatnonzero(np.isin(a.step, np.asarray(steps, dtype=np.int64)))
    out: dict[int, dict[int, int]] = {int(k): {} for k in steps}
    if sel.size == 0:
        return out
    ri, k, st, kind = a.rank_index[sel], a.step[sel], a.stage[sel], a.kind[sel]
    order = np.lexsort((np.arange(sel.size), st, k, ri))  # each (rank, step, stage) in order
    ri, k, st, kind = ri[order], k[order], st[order], kind[order]
    delta = np.where(kind == F_CODE, 1, np.where((kind == B_CODE) | (kind == I_CODE), -1, 0))
    run = np.cumsum(delta)
    new = np.ones(sel.size, dtype=bool)
    new[1:] = (ri[1:] != ri[:-1]) | (k[1:] != k[:-1]) | (st[1:] != st[:-1])
    base = (run - delta)[new]  # the running count before each group
    live = run - np.repeat(base, np.diff(np.append(np.flatnonzero(new), sel.size)))
    is_f = kind == F_CODE
    fk, fs, fl = k[is_f], st[is_f], live[is_f]
    if fk.size == 0:
        return out
    o = np.lexsort((fs, fk))
    fk, fs, fl = fk[o], fs[o], fl[o]
    first = np.concatenate([[0], np.flatnonzero((fk[1:] != fk[:-1]) | (fs[1:] != fs[:-1])) + 1])
    for i, peak in zip(first.tolist(), np.maximum.reduceat(fl, first).tolist()):
        out[int(fk[i])][int(fs[i])] = max(0, int(peak))
    return out


def _stage_metrics(tl: Timeline, placement, peaks_by_step: dict[int, dict[int, int]],
                   expected_inflight, th, replica) -> list[StageMetrics]:
    arr = tl.action_arrays()
    facts = tl.recv_facts()
    peaks: dict[int, int] = {}
    for by_stage in peaks_by_step.values():
        for s, n in by_stage.items():
            peaks[s] = max(peaks.get(s, 0), n)
    out = []
    for s, r in placement.items():
        on = arr.stage == s
        counts = {k: int((on & (arr.kind == KIND_CODE[k])).sum()) for k in ("F", "B", "I", "W")}
        comp = {k: float(int(arr.compute_ns[on & (arr.kind == KIND_CODE[k])].sum())) / US
                for k in counts}
        means = {k: (comp[k] / counts[k] if counts[k] else 0.0) for k in counts}
        exp = None
        if expected_inflight is not None:
            exp = expected_inflight.get(s)
        elif th is not None:
            exp = th.peak_inflight.get(s)
        wait, transfer = facts[r].by_stage.get(s, (None, None)) if r in facts else (None, None)
        out.append(StageMetrics(stage=s, rank=r, actions=counts, compute_us=comp,
                                mean_compute_us=means, peak_inflight=peaks.get(s, 0),
                                expected_peak_inflight=exp, pipeline=replica,
                                recv_wait_us=wait, recv_transfer_us=transfer))
    return out
