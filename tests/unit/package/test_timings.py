"""PIPEAUDIT_TIMINGS: analyze's phases on stderr, summing to the run's time; silent when off."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest

from pipeaudit import timings
from pipeaudit.trace import scanner
from tests.support.paths import REPO, SAMPLES

RUN = SAMPLES / "1f1b_p4_m8"
LINE = re.compile(r"^pipeaudit timings: start (?P<start>[0-9.]+) s · ranks (?P<ranks>[0-9.]+) s "
                  r"\((?P<n>\d+) ranks, (?P<jobs>.+?), read: (?P<read>.+?)\) · audit (?P<audit>[0-9.]+) s · "
                  r"report (?P<report>[0-9.]+) s · total (?P<total>[0-9.]+) s$")


def _analyze(*args: str, env_value: str | None) -> tuple[subprocess.CompletedProcess, float]:
    env = {k: v for k, v in os.environ.items() if k != timings.ENV}
    if env_value is not None:
        env[timings.ENV] = env_value
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pipeaudit", "analyze", str(RUN), *args],
                          capture_output=True, text=True, env=env, cwd=REPO)
    return proc, time.monotonic() - t0


@pytest.mark.parametrize("jobs, said", [("1", "1 job"), ("2", "2 jobs")])
def test_phases_sum_to_the_run(jobs, said):
    proc, wall = _analyze("--jobs", jobs, env_value="1")
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("pipeaudit timings:")]
    assert len(lines) == 1, proc.stderr
    m = LINE.match(lines[0])
    assert m, lines[0]
    assert m["n"] == "4" and m["jobs"] == said
    # the reader's mode is explicit: the tokenizer the options chose and the batch size
    tokenizer = "scanner" if scanner.available() else "msgspec"
    assert m["read"] == f"{tokenizer}, 4 MiB batches"
    phases = [float(m[k]) for k in ("start", "ranks", "audit", "report")]
    total = float(m["total"])
    assert all(p >= 0 for p in phases)
    assert abs(sum(phases) - total) <= 0.03  # five figures, each rounded to 10 ms
    # measured from the process's start: no more than the wall time seen from outside
    # (/proc's start time has a clock tick's resolution)
    assert 0 < total <= wall + 0.05
    assert float(m["start"]) > 0.05  # the interpreter and the imports are in it


def test_the_read_mode_follows_the_options():
    """Without the compiled scanner (or with a small budget) the line says so."""
    env = {k: v for k, v in os.environ.items()}
    env.update({timings.ENV: "1", "PIPEAUDIT_NO_SCANNER": "1"})
    proc = subprocess.run([sys.executable, "-m", "pipeaudit", "analyze", str(RUN), "--max-memory",
                           "16M", "--jobs", "1"], capture_output=True, text=True, env=env, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert "(4 ranks, 1 job, read: msgspec, 1 MiB batches)" in proc.stderr


@pytest.mark.parametrize("value", [None, "", "0"])
def test_silent_unless_asked(value):
    proc, _ = _analyze(env_value=value)
    assert proc.returncode == 0
    assert "timings" not in proc.stderr


def test_process_age_is_this_process():
    age = timings.process_age()
    if not sys.platform.startswith("linux"):
        assert age is None
        return
    assert age is not None and 0 < age < 24 * 3600


def test_mark_records_nothing_when_off(monkeypatch, capsys):
    monkeypatch.delenv(timings.ENV, raising=False)
    timings.mark("start")
    timings.report()
    assert capsys.readouterr().err == ""
