"""benchmarks/generated_reading.py, the long search, on a few cases: a shard from its --start,
its report written to --report as well as printed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def test_a_shard_of_the_search_reports_its_cases(tmp_path: Path) -> None:
    report = tmp_path / "report.txt"
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "generated_reading.py"),
                          "--cases", "3", "--start", "40", "--jobs", "1", "--seed", "5",
                          "--annotated", "yes", "--report", str(report)],
                         capture_output=True, text=True, timeout=600, cwd=REPO)
    assert out.returncode == 0, out.stdout + out.stderr
    first = out.stdout.splitlines()[0]
    assert first.startswith("3 cases (from case 40)"), first
    assert report.read_text().splitlines()[0] == first
    verdicts = out.stdout.splitlines()[1]
    assert verdicts.startswith("verdicts: ") and "fail" not in verdicts, verdicts
