"""The gate's result model: checks (metric, scope, baseline, now, change, threshold,
verdict, explanation) and the result of one gate run."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from pipeaudit import SCHEMA_VERSION
from pipeaudit.gate.snapshot import RunConfig
from pipeaudit.gate.thresholds import Thresholds

VERDICTS = ("pass", "warn", "fail", "skip")
SCOPES = ("pipeline", "rank", "stage")
_ORDER = {"fail": 0, "warn": 1, "pass": 2, "skip": 3}

METRIC_LABELS = {
    "bubble": "bubble",
    "rank_bubble": "bubble",
    "step_time": "step time",
    "stage_compute": "compute per step",
    "imbalance": "stage imbalance",
    "exposed_comm": "exposed communication",
    "peak_memory": "peak memory",
    "peak_inflight": "peak in-flight microbatches",
    "bubble_over_theory": "bubble above theory",
}


@dataclass
class Check:
    """One gated metric on one scope (the pipeline, a rank or a stage)."""

    metric: str
    scope: str  # pipeline | rank | stage
    index: int | None  # the rank or stage; None for the pipeline
    baseline: float | None
    now: float | None
    change: float | None  # now - baseline (mode "abs") or relative change (mode "rel")
    mode: str  # abs | rel | budget
    threshold: float | None  # the configured limit on the change, or the budget
    #: noise_k standard errors of the change of the medians (the baseline's step-to-step
    #: spread over the steps of both sides), in the change's units
    noise: float | None
    unit: str  # fraction | us | ratio | bytes | count
    verdict: str  # pass | warn | fail | skip
    explanation: str
    #: when the noise band is wider than the threshold: the steps a baseline and a run each
    #: need for it to narrow to the threshold (None: no count does, or not noisy)
    steps_needed: int | None = None
    #: True when the change exceeds the threshold but is no regression (a bubble, imbalance
    #: or exposed-communication rise in a step that is not slower); the explanation names
    #: the cause
    cleared: bool = False

    @property
    def too_noisy(self) -> bool:
        """True when the baseline's noise hid a change past the threshold: the check warned
        (its change is above the threshold, inside a noise band wider than it)."""
        return (self.verdict == "warn" and self.mode != "budget" and self.threshold is not None
                and self.noise is not None and self.noise > self.threshold
                and self.change is not None and self.change <= self.noise)

    @property
    def explained(self) -> bool:
        """Failures, warnings and cleared rises: the checks whose explanation a report shows."""
        return self.verdict in ("fail", "warn") or self.cleared

    @property
    def name(self) -> str:
        """``pipeline bubble``, ``rank 2 bubble``, ``stage 1 compute per step``, ``budget: ...``."""
        where = "pipeline" if self.scope == "pipeline" else f"{self.scope} {self.index}"
        label = f"{where} {METRIC_LABELS.get(self.metric, self.metric)}"
        return f"budget: {label}" if self.mode == "budget" else label

    @property
    def limit(self) -> float | None:
        """The change (or value, for budgets) above which the check fails."""
        if self.threshold is None:
            return None
        if self.mode == "budget":
            return self.threshold
        return max(self.threshold, self.noise or 0.0)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["name"] = self.name
        d["limit"] = self.limit
        return d


@dataclass
class GateResult:
    """All checks of one gate run, and what was compared."""

    checks: list[Check]
    run_source: str
    run_config: RunConfig
    baseline_source: str | None = None
    baseline_config: RunConfig | None = None
    config_changes: list[str] = field(default_factory=list)
    thresholds: Thresholds = field(default_factory=Thresholds)
    thresholds_file: str | None = None
    notes: list[str] = field(default_factory=list)
    baseline_steps: int | None = None  #: the steps of the baseline's series

    @property
    def verdict(self) -> str:
        """fail if any check failed, else warn if any warned, else pass."""
        vs = {c.verdict for c in self.checks}
        return "fail" if "fail" in vs else "warn" if "warn" in vs else "pass"

    @property
    def exit_code(self) -> int:
        return 1 if self.verdict == "fail" else 0

    def noisy_line(self) -> str | None:
        """One line naming the checks whose change the baseline's noise hid (they warned:
        above the threshold, inside a noise band wider than it) and the steps a baseline (and
        run) needs for them; None when there are none."""
        noisy = [c for c in self.checks if c.too_noisy]
        if not noisy:
            return None
        names = ", ".join(c.name for c in noisy[:4]) + (
            f" and {len(noisy) - 4} more" if len(noisy) > 4 else "")
        counts = [c.steps_needed for c in noisy]
        noun = "check" if len(noisy) == 1 else "checks"
        if self.baseline_steps is not None and self.baseline_steps < 3:
            return (f"a baseline of {self.baseline_steps} step(s) cannot tell noise from change: "
                    f"{len(noisy)} {noun} above the threshold stayed inside its noise band "
                    f"({names}); profile 5 steps or more for the baseline and the run "
                    "(profile --steps 5)")
        need = (f"a baseline and a run of {max(counts)} steps each would gate "
                f"{'it' if len(noisy) == 1 else 'them'} (profile --steps {max(counts)})"
                if None not in counts else "no number of steps gates a threshold of 0 against "
                "a baseline that varies")
        return (f"the baseline is too noisy to gate {len(noisy)} {noun} at the threshold (its "
                f"noise band is wider): {names}; {need}")

    def explained(self) -> list[Check]:
        """The checks whose explanation a report shows (:attr:`Check.explained`), failures
        first."""
        return [c for c in self.sorted_checks() if c.explained]

    def by_verdict(self, verdict: str) -> list[Check]:
        return [c for c in self.checks if c.verdict == verdict]

    def counts(self) -> dict[str, int]:
        return {v: len(self.by_verdict(v)) for v in VERDICTS}

    def sorted_checks(self) -> list[Check]:
        """Failures first, then warnings, passes and skips; the original order within each."""
        return sorted(self.checks, key=lambda c: _ORDER[c.verdict])

    def to_dict(self) -> dict[str, Any]:
        """The ``gate --format json`` document."""
        import msgspec

        return {
            "schema_version": SCHEMA_VERSION, "tool": "pipeaudit", "kind": "gate",
            "verdict": self.verdict, "exit_code": self.exit_code, "counts": self.counts(),
            "run": {"source": self.run_source, "config": msgspec.to_builtins(self.run_config)},
            "baseline": None if self.baseline_source is None else {
                "source": self.baseline_source,
                "config": msgspec.to_builtins(self.baseline_config)},
            "config_changes": self.config_changes,
            "thresholds": self.thresholds.to_dict(), "thresholds_file": self.thresholds_file,
            "checks": [c.to_dict() for c in self.checks], "notes": self.notes,
            "too_noisy": self.noisy_line(),
        }
