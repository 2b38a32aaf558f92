"""Side-by-side comparison of two runs, stage by stage (``pipeaudit diff``).

Either side may be traces, a saved ``analyze --format json`` document or a baseline. It
reads the statistic ``gate`` reads: the median over steps of each per-step value (a stage's
compute per step, by kind and in all, its rank's bubble, the pipeline bubble and imbalance)
from the audit's per-step series (``per_step``). An ``analyze`` document written before the
audit held them carries none: with one on either side both sides fall back to the mean per step (the stage's total over the
audited steps / number of steps), and the diff says so. Overlap and peak memory are those of
the rank that holds the stage.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from statistics import median
from typing import Any

from pipeaudit import SCHEMA_VERSION
from pipeaudit.actions import KINDS
from pipeaudit.audit.result import AuditResult, RankMetrics, StageMetrics, StepSeries
from pipeaudit.gate import stats
from pipeaudit.gate.snapshot import Snapshot
from pipeaudit.gate.stats import relative_change

NOTABLE = 0.05  # a relative change smaller than this is not named among the largest


@dataclass
class Side:
    """One stage's figures in one run."""

    rank: int | None = None
    compute_us: dict[str, float] = field(default_factory=dict)  # per step, by kind
    total_us: float | None = None
    bubble: float | None = None
    overlap: float | None = None
    peak_bytes: int | None = None
    inflight: int | None = None


@dataclass
class StageDiff:
    """A stage in run A and run B."""

    stage: int
    a: Side
    b: Side
    compute_change: float | None  # relative change of the total compute per step


@dataclass
class Row:
    """One pipeline-level figure in both runs."""

    metric: str
    a: float | None
    b: float | None
    unit: str  # fraction | us | ratio | bytes
    change: float | None  # absolute for fractions/ratios, relative for times and bytes
    mode: str  # abs | rel


@dataclass
class Mover:
    """A stage (and kind) whose figure changed notably."""

    stage: int
    what: str  # "B compute", "compute", "in-flight", "peak memory", "bubble"
    a: float | None
    b: float | None
    delta: float  # b - a in the figure's unit
    change: float | None  # relative
    unit: str

    def text(self) -> str:
        from pipeaudit.values import fmt_change, fmt_value

        rel = f", {100 * self.change:+.0f}%" if self.change is not None and self.unit != "fraction" \
            else ""
        return (f"stage {self.stage} {self.what} {fmt_value(self.a, self.unit)} -> "
                f"{fmt_value(self.b, self.unit)}{' per step' if self.unit == 'us' else ''}"
                f" ({fmt_change(self.delta, 'abs', self.unit)}{rel})")


@dataclass
class RunDiff:
    """Two runs compared stage by stage."""

    a_source: str
    b_source: str
    a_config: str
    b_config: str
    config_changes: list[str]
    pipeline: list[Row]
    stages: list[StageDiff]
    movers: list[Mover]
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        return {"schema_version": SCHEMA_VERSION, "tool": "pipeaudit", "kind": "diff", **d,
                "summary": self.summary()}

    def summary(self) -> str:
        """One sentence naming what changed most."""
        if not self.movers:
            return "No stage changed by more than 5% in compute, bubble, in-flight or memory."
        return "Changed most: " + "; ".join(m.text() for m in self.movers[:4]) + "."


def diff_runs(a: Snapshot, b: Snapshot) -> RunDiff:
    """Compare run ``a`` (before) with run ``b`` (after)."""
    ra, rb = a.audit, b.audit
    medians = a.series is not None and b.series is not None
    sa, sb = (a.series, b.series) if medians else (None, None)
    stages = sorted({s.stage for s in ra.stages} | {s.stage for s in rb.stages})
    rows = [StageDiff(s, _side(ra, s, sa), _side(rb, s, sb), None) for s in stages]
    for r in rows:
        r.compute_change = relative_change(r.a.total_us, r.b.total_us)
    notes = [] if medians else [
        f"{a.source if a.series is None else b.source} is an analyze document with no per-step "
        "series (written before the audit held them): compute, bubble and imbalance are means over steps on both sides; gate and "
        "diff of traces or baselines read the median over steps"]
    return RunDiff(
        a_source=a.source, b_source=b.source, a_config=a.config.describe(),
        b_config=b.config.describe(), config_changes=a.config.differences(b.config),
        pipeline=_pipeline(ra, rb, sa, sb), stages=rows, movers=_movers(rows), notes=notes,
    )


def _side(r: AuditResult, stage: int, series: StepSeries | None = None) -> Side:
    """One run's figures of a stage: from ``series``, the median over steps (compute per step
    by kind and in all, the bubble of its ranks), else the mean per step; with several
    pipeline replicas, the mean over the replicas that run it (the largest in-flight count
    and peak memory)."""
    sts: list[StageMetrics] = [s for s in r.stages if s.stage == stage]
    if not sts:
        return Side()
    n = max(r.num_steps, 1) * len(sts)
    ranks: list[RankMetrics] = [x for x in r.ranks if x.rank in {st.rank for st in sts}]
    kinds = [k for k in KINDS if any(st.actions.get(k, 0) for st in sts)]
    if series is not None and stage in series.stage_compute_us:
        per_kind = series.stage_compute_us[stage]
        comp = {k: stats.median(per_kind.get(k, [])) or 0.0 for k in kinds}
        total = stats.median(series.stage_total_us(stage))
        bubbles = [stats.median(series.rank_bubble[x.rank]) for x in ranks
                   if x.rank in series.rank_bubble]
        bubbles = [b for b in bubbles if b is not None]
    else:
        comp = {k: sum(st.compute_us.get(k, 0.0) for st in sts) / n for k in kinds}
        total = sum(sum(st.compute_us.values()) for st in sts) / n
        bubbles = [x.bubble for x in ranks if x.bubble is not None]
    overlaps = [x.overlap for x in ranks if x.overlap is not None]
    peaks = [x.peak_allocated_bytes for x in ranks if x.peak_allocated_bytes is not None]
    return Side(rank=sts[0].rank, compute_us=comp, total_us=total,
                bubble=sum(bubbles) / len(bubbles) if bubbles else None,
                overlap=sum(overlaps) / len(overlaps) if overlaps else None,
                peak_bytes=max(peaks) if peaks else None,
                inflight=max(st.peak_inflight for st in sts))


def _imbalance(r: AuditResult, series: StepSeries | None) -> float | None:
    """Max over median stage compute: the median over steps of the per-step ratio (the
    gate's), else the ratio of the stages' means per step."""
    if series is not None:
        return stats.median(series.imbalance)
    totals = [_side(r, s).total_us or 0.0 for s in sorted({st.stage for st in r.stages})]
    if not totals:
        return None
    med = median(totals)
    return max(totals) / med if med > 0 else None


def _bubble(r: AuditResult, series: StepSeries | None) -> float | None:
    """The pipeline bubble: the median over steps (the gate's), else the mean."""
    return stats.median(series.bubble) if series is not None else r.bubble.measured


def _overlap(r: AuditResult) -> float | None:
    comm = sum(x.comm_us for x in r.ranks)
    return 1.0 - sum(x.exposed_comm_us for x in r.ranks) / comm if comm > 0 else None


def _peak(r: AuditResult) -> float | None:
    peaks = [x.peak_allocated_bytes for x in r.ranks if x.peak_allocated_bytes is not None]
    return float(max(peaks)) if peaks else None


def _pipeline(a: AuditResult, b: AuditResult, sa: StepSeries | None,
              sb: StepSeries | None) -> list[Row]:
    def row(metric, va, vb, unit, mode):
        ch = relative_change(va, vb) if mode == "rel" else (
            None if va is None or vb is None else vb - va)
        return Row(metric, va, vb, unit, ch, mode)

    return [
        row("median step time", a.step_time_us, b.step_time_us, "us", "rel"),
        row("bubble (measured)", _bubble(a, sa), _bubble(b, sb), "fraction", "abs"),
        row("bubble (theory)", a.bubble.theory, b.bubble.theory, "fraction", "abs"),
        row("bubble (replay ideal)", a.bubble.replay_ideal, b.bubble.replay_ideal, "fraction", "abs"),
        row("imbalance part", a.bubble.imbalance_part, b.bubble.imbalance_part, "fraction", "abs"),
        row("overhead part", a.bubble.overhead_part, b.bubble.overhead_part, "fraction", "abs"),
        row("stage imbalance (max/median)", _imbalance(a, sa), _imbalance(b, sb), "ratio", "abs"),
        row("communication overlap", _overlap(a), _overlap(b), "fraction", "abs"),
        row("peak memory (max rank)", _peak(a), _peak(b), "bytes", "rel"),
    ]


def _movers(rows: list[StageDiff]) -> list[Mover]:
    """Stage figures that changed notably, the largest first (compute by time moved)."""
    compute: list[Mover] = []
    other: list[Mover] = []
    for r in rows:
        for k in KINDS:
            va, vb = r.a.compute_us.get(k), r.b.compute_us.get(k)
            if va is None and vb is None:
                continue
            ch = relative_change(va, vb)
            delta = (vb or 0.0) - (va or 0.0)
            if ch is None or abs(ch) >= NOTABLE:
                compute.append(Mover(r.stage, f"{k} compute", va, vb, delta, ch, "us"))
        if r.a.inflight is not None and r.b.inflight is not None and r.a.inflight != r.b.inflight:
            other.append(Mover(r.stage, "in-flight", r.a.inflight, r.b.inflight,
                               r.b.inflight - r.a.inflight, relative_change(r.a.inflight,
                                                                            r.b.inflight), "count"))
        if r.a.peak_bytes and r.b.peak_bytes:
            ch = relative_change(r.a.peak_bytes, r.b.peak_bytes)
            if ch is not None and abs(ch) >= NOTABLE:
                other.append(Mover(r.stage, "peak memory", r.a.peak_bytes, r.b.peak_bytes,
                                   r.b.peak_bytes - r.a.peak_bytes, ch, "bytes"))
        if r.a.bubble is not None and r.b.bubble is not None and abs(r.b.bubble - r.a.bubble) >= NOTABLE:
            other.append(Mover(r.stage, "rank bubble", r.a.bubble, r.b.bubble,
                               r.b.bubble - r.a.bubble, None, "fraction"))
    compute.sort(key=lambda m: -abs(m.delta))
    return compute + other
