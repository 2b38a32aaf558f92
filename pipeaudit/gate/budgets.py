"""Budget checks: the run's medians against absolute limits (no baseline needed)."""

from __future__ import annotations

from pipeaudit.gate import stats
from pipeaudit.values import fmt_value
from pipeaudit.gate.model import Check
from pipeaudit.audit.result import StepSeries
from pipeaudit.gate.snapshot import Snapshot
from pipeaudit.gate.thresholds import Thresholds


def budget_checks(run: Snapshot, th: Thresholds) -> list[Check]:
    """Checks of the run's medians against the budgets that are set."""
    s: StepSeries = run.series  # type: ignore[assignment]
    out: list[Check] = []

    def add(metric: str, scope: str, index: int | None, value: float | None, budget: float,
            unit: str, why: str = "") -> None:
        if value is None:
            out.append(Check(metric, scope, index, None, None, None, "budget", budget, None, unit,
                             "skip", f"{metric.replace('_', ' ')}: not measured"))
            return
        verdict = "fail" if value > budget else "pass"
        c = Check(metric, scope, index, None, value, None, "budget", budget, None, unit, verdict, "")
        over = "over" if verdict == "fail" else "within"
        c.explanation = (f"{c.name} {fmt_value(value, unit)} is {over} the budget "
                         f"{fmt_value(budget, unit)}" + (f": {why}" if why and verdict == "fail"
                                                         else ""))
        out.append(c)

    b = th.budgets()
    heavy = _heaviest_text(run)
    heavy_is = heavy.replace(", the heaviest stage", " is the heaviest stage", 1)
    if "max_bubble" in b:
        add("bubble", "pipeline", None, stats.median(s.bubble), b["max_bubble"], "fraction",
            _bubble_why(run))
    if "max_bubble_over_theory" in b:
        out.append(_over_theory(run, b["max_bubble_over_theory"]))
    if "max_rank_bubble" in b:
        hosts = {st.stage: st.rank for st in run.audit.stages}
        h = _heaviest_stage(s)
        for r in sorted(s.rank_bubble):
            why = heavy if h is not None and hosts.get(h) != r else ""
            add("rank_bubble", "rank", r, stats.median(s.rank_bubble[r]), b["max_rank_bubble"],
                "fraction", f"rank {r} waits on {why}" if why else "")
    if "max_step_time_ms" in b:
        add("step_time", "pipeline", None, stats.median(s.step_time_us),
            b["max_step_time_ms"] * 1000.0, "us", heavy_is)
    if "max_imbalance" in b:
        add("imbalance", "pipeline", None, stats.median(s.imbalance), b["max_imbalance"], "ratio",
            heavy_is)
    if "max_exposed_comm" in b:
        add("exposed_comm", "pipeline", None, stats.median(s.exposed_comm), b["max_exposed_comm"],
            "fraction")
    if "max_peak_memory_mib" in b:
        if not s.rank_peak_memory:
            out.append(Check("peak_memory", "pipeline", None, None, None, None, "budget",
                             b["max_peak_memory_mib"] * 2**20, None, "bytes", "skip",
                             "budget: peak memory: not measured (no [memory] events; profile "
                             "with --profile-memory)"))
        for r in sorted(s.rank_peak_memory):
            add("peak_memory", "rank", r, stats.median(s.rank_peak_memory[r]),
                b["max_peak_memory_mib"] * 2**20, "bytes")
    if "max_replica_spread" in b:
        job = run.audit.job or {}
        if len(run.audit.pipelines) < 2:
            out.append(Check("replica_spread", "pipeline", None, None, None, None, "budget",
                             b["max_replica_spread"], None, "ratio", "skip",
                             "budget: replica spread: the run is one pipeline"))
        else:
            slow = job.get("slowest_pipeline")
            add("replica_spread", "pipeline", slow, job.get("spread"), b["max_replica_spread"],
                "ratio", f"pipeline {slow} holds the job back (its slowest stage: "
                         f"{job.get('slowest_stage')})")
    return out


def _over_theory(run: Snapshot, budget: float) -> Check:
    """Budget on the median bubble minus the schedule's closed-form theory."""
    theory = run.audit.bubble.theory
    med = stats.median(run.series.bubble)  # type: ignore[union-attr]
    if theory is None or med is None:
        return Check("bubble_over_theory", "pipeline", None, None, None, None, "budget", budget,
                     None, "fraction", "skip",
                     "budget: pipeline bubble above theory: no closed-form theory for this run")
    gap = med - theory
    c = Check("bubble_over_theory", "pipeline", None, None, gap, None, "budget", budget, None,
              "fraction", "fail" if gap > budget else "pass", "")
    over = "over" if c.verdict == "fail" else "within"
    c.explanation = (f"{c.name}: pipeline bubble {fmt_value(med, 'fraction')} is "
                     f"{100 * gap:+.1f} pts from theory {fmt_value(theory, 'fraction')} "
                     f"({run.audit.bubble.theory_formula}), {over} the budget "
                     f"{100 * budget:+.1f} pts")
    why = _bubble_why(run, with_theory=False)
    if c.verdict == "fail" and why:
        c.explanation += f": {why}"
    return c


def _heaviest_stage(s: StepSeries) -> int | None:
    med = {st: stats.median(s.stage_total_us(st)) or 0.0 for st in s.stage_compute_us}
    return max(med, key=lambda x: med[x]) if med else None


def _heaviest_text(run: Snapshot) -> str:
    s: StepSeries = run.series  # type: ignore[assignment]
    h = _heaviest_stage(s)
    if h is None:
        return ""
    med = {st: stats.median(s.stage_total_us(st)) or 0.0 for st in s.stage_compute_us}
    return (f"stage {h}, the heaviest stage ({fmt_value(med[h], 'us')} per step, median stage "
            f"{fmt_value(stats.median(med.values()), 'us')})")


def _bubble_why(run: Snapshot, *, with_theory: bool = True) -> str:
    b = run.audit.bubble
    if b.theory is None or b.replay_ideal is None or b.measured is None:
        return ""
    head = (f"theory {fmt_value(b.theory, 'fraction')} ({b.theory_formula}); " if with_theory
            else "")
    return (head + f"{100 * (b.replay_ideal - b.theory):+.1f} pts from uneven stages and F/B/W "
            f"durations (replay ideal {fmt_value(b.replay_ideal, 'fraction')}) and "
            f"{100 * (b.measured - b.replay_ideal):+.1f} pts from communication, waits and host "
            "overhead")
