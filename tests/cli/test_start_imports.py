"""`pipeaudit analyze` imports, before its first rank is read, only what reading needs: no
polars or numpy (they load while a thread reads the first rank), no reporter, no audit, no
schedule catalogue, no torch/pandas/rich/matplotlib (issue 20: the start phase). Checked in
a fresh interpreter at the moment the start phase ends."""

from __future__ import annotations

import json

import pytest

from pipeaudit.trace import scanner
from tests.support.child import run_python
from tests.support.paths import SAMPLES

SAMPLE = SAMPLES / "1f1b_p4_m8"

#: Modules that must not be loaded before the first rank is read.
NOT_BEFORE_READING = ("pipeaudit.report", "pipeaudit.audit", "pipeaudit.timeline.model",
                      "pipeaudit.api", "pipeaudit.schedules", "polars", "numpy", "torch", "pandas",
                      "rich", "matplotlib")

_PROBE = """
import json, sys
from pipeaudit import timings
seen = {}
_mark = timings.mark_once

def mark(phase, note=""):
    if phase == "start" and "start" not in seen:
        seen["start"] = sorted(m for m in sys.modules if m.startswith(%r))
    _mark(phase, note)

timings.mark_once = mark
from pipeaudit.cli.main import main
try:
    main(["analyze", %r, "--format", "json", "--jobs", "1"])
except SystemExit as exc:
    seen["exit"] = exc.code
seen["end"] = sorted(m for m in sys.modules if m.startswith(%r))
print("PROBE " + json.dumps(seen), file=sys.stderr)
"""


def _probe() -> dict:
    code = _PROBE % (NOT_BEFORE_READING, str(SAMPLE), NOT_BEFORE_READING)
    proc = run_python(code, timeout=300)
    line = next(ln for ln in proc.stderr.splitlines() if ln.startswith("PROBE "))
    return json.loads(line[len("PROBE "):])


@pytest.mark.skipif(not scanner.available(), reason="reading ahead needs the compiled scanner")
def test_analyze_reads_before_importing_the_audit_and_the_reporters():
    seen = _probe()
    assert seen["exit"] == 0
    assert seen["start"] == []  # the start phase ended (first rank read) with none of them
    # and they are imported when they are needed: the audit, and the JSON reporter only
    assert "pipeaudit.audit.run" in seen["end"]
    assert "pipeaudit.report.json_doc" in seen["end"]
    assert "pipeaudit.report.markdown" not in seen["end"]
    assert "pipeaudit.report.step_view" not in seen["end"]
