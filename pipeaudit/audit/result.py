"""The audit result: what `pipeaudit analyze` reports, as plain dataclasses.

Times are microseconds (floats) in the result; fractions are in [0, 1].
``to_dict()`` gives the JSON document (``schema_version`` 1) that the CLI
prints with ``--format json`` and that baselines store. ``per_step`` holds the
per-step values of the gated metrics (:class:`StepSeries`), measured once by the
audit and read by the gate, ``diff``, ``watch``, the training handler and the API.
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
    #: the unit of ``measured`` and ``expected``: "fraction" (of the step), "ratio", "us",
    #: "count" or None
    unit: str | None = None


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
    #: the pipeline replica the rank belongs to, and its stage position in it
    pipeline: int | None = 0
    position: int | None = None
    #: "step window" (docs/metrics.md's bubble) or "own window" (ranks of the pipeline missing: the
    #: rank's first to last compute in each step, a per-rank figure)
    bubble_scope: str | None = None
    #: mean per step, µs: span (the window stretched by the step's collectives), compute,
    #: bubble, exposed_p2p, exposed_dp, dp_comm (see pipeaudit.audit.breakdown)
    breakdown: dict[str, float] | None = None
    #: data-parallel collectives: time spent waiting for the slowest peer, mean per step (µs)
    dp_wait_us: float | None = None
    #: point-to-point receives over the whole trace (µs): waiting for the peer to send, and
    #: moving the bytes; None when no recv was matched with its send
    recv_wait_us: float | None = None
    recv_transfer_us: float | None = None
    recvs_matched: int = 0
    recvs: int = 0


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
    pipeline: int | None = 0
    #: the stage's receives (whole trace, µs): waiting for the sender, and transfer
    recv_wait_us: float | None = None
    recv_transfer_us: float | None = None


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
class StepSeries:
    """Per-step values of the audited metrics, one entry per audited step, in step order
    (the gate compares their medians and judges noise from their spread).

    - ``step_time_us``: |W_k|; ``bubble``: the pipeline bubble of step k (mean over ranks),
      ``rank_bubble`` per rank (as ``RankMetrics.bubble_by_step``);
    - ``exposed_comm``: per rank, the step's exposed communication (point-to-point transfer
      and data-parallel collectives that no compute hides, recv waiting left out: that is
      bubble) as a share of the step's span (``RankMetrics.breakdown``); the pipeline value is
      the mean over ranks;
    - ``stage_compute_us``: per stage and kind, the compute of its actions in step k;
    - ``imbalance``: max stage compute / median stage compute in step k;
    - ``stage_peak_inflight``: per stage, peak (F done - B or I done) in step k's order;
    - ``rank_peak_memory``: per rank with ``[memory]`` samples, the max ``Total Allocated``
      between the start of W_k and the start of W_{k+1} (samples before W_0 count for step 0).
    """

    steps: list[int]
    step_time_us: list[float]
    bubble: list[float]
    exposed_comm: list[float]
    imbalance: list[float]
    rank_bubble: dict[int, list[float]]
    rank_exposed_comm: dict[int, list[float]]
    stage_compute_us: dict[int, dict[str, list[float]]]
    stage_peak_inflight: dict[int, list[int]]
    rank_peak_memory: dict[int, list[int | None]] = field(default_factory=dict)

    def stage_total_us(self, stage: int) -> list[float]:
        """Per step, a stage's compute over all kinds."""
        by_kind = self.stage_compute_us[stage]
        return [sum(v) for v in zip(*by_kind.values())] if by_kind else []


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
    #: "step window" or "own window" (see RankMetrics.bubble_scope)
    scope: str | None = None
    #: the source's published formula at the measured durations (Published.to_dict()); its
    #: ``value`` is a fraction of the step, like ``theory``
    published: dict[str, Any] | None = None


@dataclass
class PipelineSummary:
    """One pipeline replica of the job: its ranks, bubble, step time and what held it back."""

    pipeline: int
    ranks: list[int]  #: the replica's ranks in stage order (TP peers together), present or not
    ranks_missing: list[int]
    bubble: float | None
    replay_ideal: float | None
    step_time_us: float | None  #: median over the audited steps
    slowest_stage: int | None  #: the stage with the most compute per step
    slowest_stage_compute_us: float | None  #: ... its compute per step


@dataclass
class AuditResult:
    """Everything `analyze` measured about a run.

    ``num_ranks`` is the pipeline's P (from the job: process groups, world size, manifest),
    not the number of files given; ``ranks_present`` and ``ranks_missing`` say which of the
    job's ranks had a trace."""

    schedule: str | None
    schedule_source: str  # declared | manifest | detected | unknown
    detected_schedules: list[str]
    num_ranks: int
    num_stages: int
    num_microbatches: int | None  #: None when the reading is uncertain (see ``uncertain``)
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
    #: the job's layout: pp, dp, tp, source, world_size, replicas
    layout: dict[str, Any] | None = None
    pipelines: list[PipelineSummary] = field(default_factory=list)
    ranks_present: list[int] = field(default_factory=list)
    ranks_missing: list[int] = field(default_factory=list)
    #: what the steps were found from (ProfilerStep spans, optimizer annotations, ...)
    step_evidence: str | None = None
    #: inferred actions: share of the pipeline threads' compute that lies in an action
    inference_coverage: float | None = None
    #: job-level figures when the job has several pipeline replicas (see audit.job)
    job: dict[str, Any] | None = None
    #: host clock offsets applied from matched send/recv pairs (timeline.p2p.ClockCorrection)
    clock: dict[str, Any] | None = None
    #: why the actions read from the ops cannot be trusted ({rank, reason} each; empty when
    #: the reading holds the structure every schedule has): schedule, M and theory are then
    #: not given, and the bubbles are marked uncertain
    uncertain: list[dict[str, Any]] = field(default_factory=list)
    #: inferred ranks: where the schedule thread's compute went ({rank, compute_us,
    #: in_actions_us, start_up_us, wrap_up_us, unexplained_us, coverage} each;
    #: timeline.conservation)
    conservation: list[dict[str, Any]] = field(default_factory=list)
    #: per-step values of the audited metrics (None: no pipeline step)
    per_step: StepSeries | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON document of this result (mapping keys as JSON has them: strings)."""
        d = _string_keys(asdict(self))
        return {"schema_version": SCHEMA_VERSION, "tool": "pipeaudit", **d}

    @property
    def step_time_us(self) -> float | None:
        """Median step time over the audited steps."""
        if not self.steps:
            return None
        times = sorted(s.step_time_us for s in self.steps)
        n = len(times)
        return times[n // 2] if n % 2 else (times[n // 2 - 1] + times[n // 2]) / 2


def _string_keys(value: Any) -> Any:
    """``value`` with every mapping's keys as strings, as its JSON text reads back (the
    per-step series are keyed by rank and stage)."""
    if isinstance(value, dict):
        return {str(k) if not isinstance(k, str) else k: _string_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_string_keys(v) for v in value]
    return value
