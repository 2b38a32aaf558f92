"""CI gate and run comparison: baselines, thresholds, checks and per-stage diffs.

    snap = load_snapshot(["sample_traces/1f1b_p4_m8"])
    base = read_document("baseline.json", baseline_only=True)
    result = gate(snap, base, Thresholds())
    result.verdict, [c.explanation for c in result.by_verdict("fail")]
"""

from __future__ import annotations

from pipeaudit.gate.compare import gate
from pipeaudit.gate.model import Check, GateResult
from pipeaudit.gate.diff import RunDiff, diff_runs
from pipeaudit.audit.result import StepSeries
from pipeaudit.gate.snapshot import (
    RunConfig, Snapshot, baseline_json, load_snapshot, read_document, snapshot_from_run,
)
from pipeaudit.gate.thresholds import Thresholds, load_thresholds

__all__ = [
    "Check", "GateResult", "RunConfig", "RunDiff", "Snapshot", "StepSeries", "Thresholds",
    "baseline_json", "diff_runs", "gate", "load_snapshot", "load_thresholds", "read_document",
    "snapshot_from_run",
]
