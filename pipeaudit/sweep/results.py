"""Sweep results: one record per grid point, saved as ``sweep.json`` and ``sweep.csv``.

``sweep.json`` (``schema_version`` 1)::

    {"schema_version": 1, "tool": "pipeaudit sweep", "created": ISO 8601,
     "options": {...the options that shape every run...},
     "records": [SweepRecord, ...]}

Times in records are microseconds, fractions in [0, 1], memory in bytes.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pipeaudit.errors import ConfigError
from pipeaudit.outfiles import write_text_atomic

SCHEMA_VERSION = 1
TOOL = "pipeaudit sweep"
JSON_NAME = "sweep.json"
CSV_NAME = "sweep.csv"
STATUSES = ("ok", "skipped", "failed")


@dataclass
class SweepRecord:
    """One grid point: what ran (or why not) and what the audit measured."""

    key: str  #: run directory name under ``runs/``
    schedule: str
    stages: int  #: P
    microbatches: int  #: M
    chunks: int  #: v
    status: str  #: ok | skipped | failed
    reason: str | None = None  #: why skipped or failed (one line)
    measured_bubble: float | None = None
    theory_bubble: float | None = None
    theory_formula: str | None = None
    published_bubble: float | None = None  #: the source's formula as a fraction of the step
    published_formula: str | None = None  #: that formula and its source
    replay_ideal: float | None = None
    step_time_us: float | None = None  #: median step window over the audited steps
    throughput_samples_s: float | None = None  #: global batch / median step time
    global_batch: int | None = None
    peak_memory_bytes: int | None = None  #: max Total Allocated over ranks (profile_memory)
    peak_inflight: int | None = None  #: max over stages of the measured in-flight peak
    expected_peak_inflight: int | None = None  #: max over stages of the schedule's peak
    findings: list[str] = field(default_factory=list)  #: finding codes
    run_dir: str | None = None  #: relative to the sweep directory
    wall_s: float | None = None  #: profile + audit wall time of this point

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "SweepRecord":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


@dataclass
class SweepResult:
    """A whole sweep: the options that shaped the runs and one record per grid point."""

    options: dict[str, Any]
    records: list[SweepRecord]
    created: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))

    def to_dict(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "tool": TOOL, "created": self.created,
                "options": self.options, "records": [_clean(asdict(r)) for r in self.records]}

    def record(self, key: str) -> SweepRecord | None:
        return next((r for r in self.records if r.key == key), None)


def _clean(x: Any) -> Any:
    if isinstance(x, float):
        return None if math.isnan(x) or math.isinf(x) else x
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_clean(v) for v in x]
    return x


def to_json_text(result: SweepResult) -> str:
    return json.dumps(result.to_dict(), indent=2) + "\n"


def to_csv_text(result: SweepResult) -> str:
    """Flat CSV: one row per record, findings joined with ``;``, empty cells for None."""
    names = [f.name for f in fields(SweepRecord)]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(names)
    for r in result.records:
        d = _clean(asdict(r))
        d["findings"] = ";".join(d["findings"])
        w.writerow(["" if d[n] is None else d[n] for n in names])
    return buf.getvalue()


def save(result: SweepResult, out_dir: str | Path) -> None:
    """Write ``sweep.json`` and ``sweep.csv`` into ``out_dir`` (atomically, each)."""
    out = Path(out_dir)
    write_text_atomic(out / JSON_NAME, to_json_text(result), what="the sweep results")
    write_text_atomic(out / CSV_NAME, to_csv_text(result), what="the sweep results")


def load(out_dir: str | Path) -> SweepResult:
    """Read ``out_dir/sweep.json``; ConfigError naming the file and the problem otherwise."""
    path = Path(out_dir) / JSON_NAME
    if Path(out_dir).is_file():
        raise ConfigError(f"{out_dir}: is a file; expected a sweep directory holding {JSON_NAME}")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: not found (is {out_dir} the --out of a pipeaudit sweep?)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot be read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(doc, dict) or doc.get("tool") != TOOL:
        raise ConfigError(f"{path}: not a pipeaudit sweep result (no \"tool\": \"{TOOL}\")")
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise ConfigError(f"{path}: schema_version {doc.get('schema_version')!r} is not supported "
                          f"(this pipeaudit reads {SCHEMA_VERSION})")
    try:
        records = [SweepRecord.from_dict(r) for r in doc["records"]]
    except (KeyError, TypeError) as exc:
        raise ConfigError(f"{path}: malformed records ({exc})") from None
    for r in records:
        if r.status not in STATUSES:
            raise ConfigError(f"{path}: record {r.key!r} has unknown status {r.status!r}")
    return SweepResult(options=dict(doc.get("options") or {}), records=records,
                       created=str(doc.get("created", "")))
