"""The audit result: what `pipeaudit analyze` reports, as plain dataclasses.

Times are microseconds (floats) in the result; fractions are in [0, 1].
``to_dict()`` gives the JSON document (``schema_version`` 1) that the CLI
prints with ``--format json`` and that baselines store.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from pipeaudit import SCHEMA_VERSION

SEVERITIES = ("info", "warning", "error")


@dataclass
class Finding:
    """One deviation worth a user's attention."""

    code: str
    severity: str
    rank: int | None
    stage: int | None
    measured: float | None
    expected: float | None
    message: str


@dataclass
class RankMetrics:
    """Per-rank figures, averaged (fractions) or summed (times) over the audited steps."""

    rank: int
    stages: list[int]
    bubble: float | None
    bubble_by_step: list[float]
    replay_bubble: float | None
    idle_fraction: float | None
    compute_us: float
    window_us: float
    comm_us: float
    exposed_comm_us: float
    overlap: float | None
    other_compute_us: float
    span_us: float
    busy_us: float
    peak_allocated_bytes: int | None
    device_type: str
    path: str


@dataclass
class StageMetrics:
    """Per-stage figures: action counts and compute time by kind (totals over steps)."""

    stage: int
    rank: int
    actions: dict[str, int]
    compute_us: dict[str, float]
    mean_compute_us: dict[str, float]
    peak_inflight: int
    expected_peak_inflight: int | None


@dataclass
class StepMetrics:
    """One step: its window over all ranks and its bubble."""

    step: int
    profiler_step: int | None
    start_us: float
    step_time_us: float
    bubble: float
    replay_ideal: float | None
    replay_step_time_us: float | None


@dataclass
class BubbleSummary:
    """Pipeline bubble: measured vs closed-form theory vs replay of the observed order."""

    measured: float | None
    theory: float | None
    theory_formula: str | None
    theory_notes: str | None
    replay_ideal: float | None
    imbalance_part: float | None  # replay_ideal - theory: uneven stages and F/B/W durations
    overhead_part: float | None  # measured - replay_ideal: communication, waits, host overhead
    ratio: float | None = None
    ratio_formula: str | None = None
    #: the source's published formula at the measured durations (Published.to_dict()); its
    #: ``value`` is a fraction of the step, like ``theory``
    published: dict[str, Any] | None = None


@dataclass
class AuditResult:
    """Everything `analyze` measured about a run."""

    schedule: str | None
    schedule_source: str  # declared | manifest | detected | unknown
    detected_schedules: list[str]
    num_ranks: int
    num_stages: int
    num_microbatches: int
    num_chunks: int
    num_steps: int
    actions_inferred: bool
    action_source: str
    pipeline_found: bool
    device_type: str
    ranks: list[RankMetrics]
    stages: list[StageMetrics]
    steps: list[StepMetrics]
    bubble: BubbleSummary
    findings: list[Finding]
    inputs: list[str]
    notes: list[str] = field(default_factory=list)
    manifest: dict[str, Any] | None = None
    #: damaged traces read with ``--salvage``: SalvageReport.to_dict() of each (empty otherwise)
    salvage: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The JSON document of this result."""
        d = asdict(self)
        return {"schema_version": SCHEMA_VERSION, "tool": "pipeaudit", **d}

    @property
    def step_time_us(self) -> float | None:
        """Median step time over the audited steps."""
        if not self.steps:
            return None
        times = sorted(s.step_time_us for s in self.steps)
        n = len(times)
        return times[n // 2] if n % 2 else (times[n // 2 - 1] + times[n // 2]) / 2
