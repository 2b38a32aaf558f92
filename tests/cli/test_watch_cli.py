"""`pipeaudit watch`: windows of any writer as they land; --gate exits 1 naming the stage."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from tests.support.cli import invoke
from tests.support.child import repo_env
from tests.support.paths import REPO, SAMPLES

BASE_RUN = SAMPLES / "1f1b_p4_m8"
SLOW_RUN = SAMPLES / "1f1b_p4_m8_imb_s1x3"  # stage 1 made three times heavier


def _window(src, dst):
    """Lay a run out as torchtitan does: profile_trace/iteration_N/rank{r}_trace.json.gz."""
    tmp = dst.with_name("." + dst.name)
    tmp.mkdir(parents=True)
    for r in range(4):
        shutil.copy(src / f"rank{r}.json.gz", tmp / f"rank{r}_trace.json.gz")
    os.rename(tmp, dst)


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    path = tmp_path_factory.mktemp("watch") / "baseline.json"
    assert invoke("baseline", BASE_RUN, "-o", path).exit_code == 0
    return path


def test_once_with_gate_names_the_slower_stage(tmp_path, baseline):
    _window(BASE_RUN, tmp_path / "profile_trace" / "iteration_10")
    _window(SLOW_RUN, tmp_path / "profile_trace" / "iteration_20")
    res = invoke("watch", tmp_path, "--once", "--gate", baseline)
    assert res.exit_code == 1, res.output
    lines = res.stdout.splitlines()
    assert lines[0].startswith("profile_trace/iteration_10: bubble 49.2% (theory 27.3%")
    first = res.stdout.split("profile_trace/iteration_20:")[0]  # its line, wrapped at 120
    assert "gate: pass" in first and "REGRESSION" not in first
    assert "REGRESSION stage 1 compute per step" in res.stdout
    last = res.stdout.split("regression in profile_trace/iteration_20:")[1]  # wrapped at 120
    assert "stage 1 compute per step" in " ".join(last.split())
    assert max(map(len, res.stdout.splitlines())) <= 120


def test_json_document(tmp_path, baseline):
    _window(SLOW_RUN, tmp_path / "iteration_20")
    res = invoke("watch", tmp_path, "--once", "--gate", baseline, "--format", "json")
    assert res.exit_code == 1
    doc = json.loads(res.stdout)
    assert doc["schema_version"] == 1 and doc["kind"] == "watch"
    assert doc["regressed"] == ["iteration_20"]
    (w,) = doc["windows"]
    assert w["gate"]["verdict"] == "fail"
    assert {(c["scope"], c["index"]) for c in w["gate"]["failed"]} >= {("stage", 1)}


def test_empty_folder_and_bad_inputs(tmp_path):
    res = invoke("watch", tmp_path, "--once")
    assert (res.exit_code, res.stdout) == (2, "")
    assert res.stderr == (f"pipeaudit: error: {tmp_path}: no profiled window found (no trace "
                          "files in this folder or below)\n")
    res = invoke("watch", tmp_path / "nope", "--once")
    assert res.exit_code == 2 and res.stderr.count("\n") == 1 and "nope" in res.stderr
    (tmp_path / "b.json").write_text("{")
    res = invoke("watch", tmp_path, "--gate", tmp_path / "b.json", "--once")
    assert res.exit_code == 2 and "b.json" in res.stderr and "Traceback" not in res.output


def test_watch_sees_a_window_land_while_it_runs(tmp_path, baseline):
    """A real `pipeaudit watch` process: the first window is there at start, the second lands
    while it polls (a slower stage 1): one line each, then exit 1 naming stage 1."""
    _window(BASE_RUN, tmp_path / "iteration_10")
    env = repo_env()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeaudit", "watch", str(tmp_path), "--gate", str(baseline),
         "--interval", "0.2", "--settle", "0.5", "--max-windows", "2", "--timeout", "120"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline()
        assert first.startswith("iteration_10: bubble"), first + proc.stderr.read()
        time.sleep(0.3)
        _window(SLOW_RUN, tmp_path / "iteration_20")
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err
    assert "iteration_20: bubble 52.4%" in out
    assert "regression in iteration_20:" in out and "stage 1 compute per step" in out
