"""End to end: `python -m pipeaudit baseline` then `gate` in real subprocesses."""

from __future__ import annotations

import subprocess
import sys
from tests.support.child import repo_env
from tests.support.paths import SAMPLES


def run(*args, cwd, env=None):
    e = repo_env()
    e.pop("GITHUB_STEP_SUMMARY", None)
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "pipeaudit", *map(str, args)], cwd=cwd, env=e,
                          capture_output=True, text=True, timeout=300)


def test_baseline_then_gate_subprocess(tmp_path):
    base = tmp_path / "baseline.json"
    r = run("baseline", SAMPLES / "1f1b_p4_m8", "-o", base, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert base.is_file() and r.stdout == ""

    same = run("gate", SAMPLES / "1f1b_p4_m8", "--baseline", base, cwd=tmp_path)
    assert same.returncode == 0, same.stdout + same.stderr
    assert same.stdout.rstrip().splitlines()[-1].startswith("PASS")

    summary = tmp_path / "summary.md"
    heavy = run("gate", SAMPLES / "1f1b_p4_m8_imb_s1x3", "--baseline", base, "--format", "github",
                cwd=tmp_path, env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert heavy.returncode == 1, heavy.stderr
    assert "::error title=pipeaudit gate%3A stage 1 compute per step::" in heavy.stdout
    assert "stage 1 got heavier" in summary.read_text()

    bad = tmp_path / "bad.json"
    bad.write_text("{ not json")
    err = run("gate", SAMPLES / "1f1b_p4_m8", "--baseline", bad, cwd=tmp_path)
    assert err.returncode == 2 and err.stdout == ""
    assert err.stderr.count("\n") == 1 and str(bad) in err.stderr and "Traceback" not in err.stderr
