"""Harness faults keep the traces of finished steps, and the analysis audits only those.

What the harness tests already prove (tests/e2e/test_harness.py): a rank that raises, is
SIGKILLed or hangs makes ``pipeaudit profile`` fail naming the rank, within ``--timeout``, with
no stray process; a rank that raises keeps ``partial-rank{r}.json.gz``. Added here:

* SIGKILL: the surviving ranks write their partial traces (the killed rank cannot: nothing
  runs in a SIGKILLed process), and ``pipeaudit analyze`` on the run directory audits the
  finished steps only (PARTIAL_TRACE, MISSING_RANKS), never the step that was cut;
* hang: when the launcher stops the run at ``--timeout`` (SIGTERM), *every* rank — the hung one
  and the one blocked in gloo waiting for it — unwinds and writes its partial trace; checked
  through a real ``pipeaudit profile`` process: exit code, one stderr line naming the rank,
  time, and no process left (found through the run's own temp directory, not the launcher);
* a rank stopped inside the first profiled step leaves no complete step: analyze says so;
* a run that succeeds writes complete traces (no partial marker).
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

from pipeaudit.harness import HarnessError, ModelConfig, ProfileConfig, run_profile  # noqa: E402
from pipeaudit.harness.faults import ENV_VAR as FAULT_ENV  # noqa: E402
from pipeaudit.trace.cut import PARTIAL_KEY  # noqa: E402
from tests.support.child import repo_env
from tests.support.cli import invoke

pytestmark = pytest.mark.slow
TINY = ["--layers", "2", "--hidden", "32", "--seq-len", "4", "--microbatches", "2", "--steps", "2",
        "--warmup-steps", "1"]


def _processes_mentioning(text: str) -> list[int]:
    """Live (non-zombie) processes whose command line contains ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if text in cmd and stat[stat.rindex(")") + 2] != "Z":
            found.append(int(entry.name))
    return found


def _header_and_steps(path: Path) -> tuple[dict, list[str]]:
    doc = json.loads(gzip.decompress(path.read_bytes()))
    steps = sorted(e["name"] for e in doc["traceEvents"]
                   if e.get("ph") == "X" and e["name"].startswith("ProfilerStep#"))
    return {k: v for k, v in doc.items() if k != "traceEvents"}, steps


def _analyze(out: Path) -> tuple[int, dict | str]:
    res = invoke("analyze", str(out), "--format", "json")
    return res.exit_code, (json.loads(res.stdout) if res.exit_code == 0 else res.stderr)


def _config(tmp_path: Path, name: str, **kw) -> ProfileConfig:
    return ProfileConfig(out=str(tmp_path / name), schedule="1f1b", stages=2, microbatches=2,
                         model=ModelConfig(layers=2, hidden=32, seq_len=4), steps=2, warmup_steps=1,
                         **kw)


def test_sigkill_survivors_keep_finished_steps(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the run's status dir: found below
    monkeypatch.setenv(FAULT_ENV, "1:2:kill")  # step 2 = the second profiled step
    with pytest.raises(HarnessError) as exc:
        run_profile(_config(tmp_path, "kill", timeout=60))
    assert exc.value.rank == 1 and "rank 1 was killed by SIGKILL" in str(exc.value)
    assert not _processes_mentioning(str(tmp_path))
    out = tmp_path / "kill"
    assert not (out / "manifest.json").exists()
    assert not (out / "rank1.json.gz").exists() and not (out / "partial-rank1.json.gz").exists()
    header, steps = _header_and_steps(out / "partial-rank0.json.gz")
    assert header[PARTIAL_KEY] == 1 and steps == ["ProfilerStep#0", "ProfilerStep#1"]
    code, doc = _analyze(out)
    assert code == 0, doc
    assert [s["profiler_step"] for s in doc["steps"]] == [0]  # the cut step is not audited
    codes = [f["code"] for f in doc["findings"]]
    assert "PARTIAL_TRACE" in codes and "MISSING_RANKS" in codes
    (rep,) = doc["salvage"]
    assert rep["kind"] == "partial" and rep["excluded_steps"] == [1] and rep["rank"] == 0


def test_hang_through_the_cli_keeps_every_rank_trace(tmp_path):
    out = tmp_path / "hang"
    env = repo_env(TMPDIR=str(tmp_path), **{FAULT_ENV: "1:2:hang"})
    timeout = 15
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pipeaudit", "profile", "--schedule", "1f1b",
                           "--stages", "2", *TINY, "--timeout", str(timeout), "--out", str(out)],
                          capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith(f"pipeaudit: error: run timed out after {timeout} s: rank 1 hung")
    assert timeout <= elapsed < timeout + 25, elapsed
    deadline = time.monotonic() + 5
    while _processes_mentioning(str(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _processes_mentioning(str(tmp_path))
    # the hung rank and the rank blocked in gloo waiting for it both wrote their finished step
    for r in (0, 1):
        header, steps = _header_and_steps(out / f"partial-rank{r}.json.gz")
        assert header[PARTIAL_KEY] == 1 and "ProfilerStep#0" in steps
    code, doc = _analyze(out)
    assert code == 0, doc
    assert doc["num_steps"] == 1 and [s["profiler_step"] for s in doc["steps"]] == [0]
    assert [f["code"] for f in doc["findings"]].count("PARTIAL_TRACE") == 2
    assert "MISSING_RANKS" not in [f["code"] for f in doc["findings"]]


def test_fault_in_the_first_profiled_step_leaves_no_complete_step(tmp_path, monkeypatch):
    monkeypatch.setenv(FAULT_ENV, "0:1:raise")
    with pytest.raises(HarnessError, match="rank 0 failed during profile step 1"):
        run_profile(_config(tmp_path, "first", timeout=60))
    header, _ = _header_and_steps(tmp_path / "first" / "partial-rank0.json.gz")
    assert header[PARTIAL_KEY] == 0
    code, err = _analyze(tmp_path / "first")
    assert code == 2
    assert "partial-rank0.json.gz: a partial trace: the harness stopped rank 0 during ProfilerStep#0, " \
           "before any step was complete" in err


def test_a_run_that_succeeds_writes_complete_traces(tmp_path, monkeypatch):
    monkeypatch.delenv(FAULT_ENV, raising=False)
    run_profile(_config(tmp_path, "ok", timeout=120))
    for r in (0, 1):
        header, steps = _header_and_steps(tmp_path / "ok" / f"rank{r}.json.gz")
        assert header.get(PARTIAL_KEY) is None and steps == ["ProfilerStep#0", "ProfilerStep#1"]
    code, doc = _analyze(tmp_path / "ok")
    assert code == 0 and doc["num_steps"] == 2 and doc["salvage"] == []
