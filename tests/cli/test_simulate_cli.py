"""``pipeaudit simulate`` through click's runner (and one real subprocess)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tests.support.child import repo_env
from tests.support.paths import REPO, DOCS
from tests.support.cli import invoke


def run(*args: str):
    return invoke("simulate", *args, catch_exceptions=False)


def assert_plain(text: str) -> None:
    assert "\x1b" not in text, "ANSI escape codes in output"
    assert text.isascii(), "non-ASCII characters in output"


def test_text_mode_1f1b():
    res = run("--schedule", "1f1b", "-P", "4", "-M", "8")
    assert res.exit_code == 0, res.output
    out = res.output
    assert_plain(out)
    lines = out.splitlines()
    rows = [ln for ln in lines if ln.startswith("rank ")]
    assert rows[0] == "rank 0 | F0 F1 F2 F3 .. .. .. .. .. .. B0 == F4 B1 == F5 B2 == F6 B3 == F7 B4 == .. B5 == .. B6 == .. B7 =="
    assert rows[3].startswith("rank 3 | .. .. .. F0 B0 == F1 B1 ==")
    assert len({len(r) for r in rows[:4]}) == 1  # aligned: every rank row has the same width
    assert any(ln.startswith("t      | 0  1  2  3") for ln in lines)
    assert "(P-1)/(M+P-1)" in out and "27.27%" in out and "(P-1)/M" in out
    assert "theory min(M, P-s)" in out
    assert "Peak in-flight microbatches per stage" in out


def test_text_mode_split_backward_shows_i_and_w():
    res = run("--schedule", "zb-h1", "-P", "3", "-M", "6", "--tw", "1")
    assert res.exit_code == 0
    assert "I0" in res.output and "W0" in res.output
    assert "B=2 (I=1 + W=1)" in res.output


def test_json_bubble_is_3_over_11_for_every_rank():
    res = run("--schedule", "1f1b", "-P", "4", "-M", "8", "--format", "json")
    assert res.exit_code == 0
    doc = json.loads(res.output)
    assert doc["schema_version"] == 1
    assert (doc["schedule"], doc["P"], doc["M"], doc["v"]) == ("1f1b", 4, 8, 1)
    assert [r["rank"] for r in doc["ranks"]] == [0, 1, 2, 3]
    for r in doc["ranks"]:
        assert r["bubble"] == pytest.approx(3 / 11, abs=1e-12)
    assert doc["bubble"]["simulated"] == pytest.approx(3 / 11)
    assert doc["bubble"]["theory"] == pytest.approx(3 / 11)
    assert doc["bubble"]["theory_formula"] == "(P-1)/(M+P-1)"
    assert doc["makespan"] == pytest.approx(33)
    assert [(s["stage"], s["rank"], s["peak_inflight"]) for s in doc["stages"]] == [
        (0, 0, 4), (1, 1, 3), (2, 2, 2), (3, 3, 1)]
    assert all(s["peak_inflight"] == s["theory_peak_inflight"] for s in doc["stages"])
    assert len(doc["actions"]) == 64


def test_durations_are_per_rank_and_split_over_chunks():
    doc = json.loads(run("--schedule", "interleaved", "-P", "4", "-M", "8", "--format", "json").output)
    assert doc["v"] == 2 and doc["durations"]["per_stage"]["t_f"] == 0.5
    assert doc["bubble"]["simulated"] == pytest.approx(3 / 19)
    assert doc["makespan"] == pytest.approx(8 * 3 + 3 * 1.5)


def test_comm_latency_raises_the_bubble():
    a = json.loads(run("-P", "4", "-M", "8", "--format", "json").output)
    b = json.loads(run("-P", "4", "-M", "8", "--comm", "0.5", "--format", "json").output)
    assert b["bubble"]["simulated"] > a["bubble"]["simulated"]
    assert b["bubble"]["theory"] == a["bubble"]["theory"]


def test_compare_mode():
    res = run("--compare", "gpipe,1f1b,interleaved-1f1b,zbv", "-P", "4", "-M", "8")
    assert res.exit_code == 0
    out = res.output
    assert_plain(out)
    assert "Schedules compared" in out
    for name in ("gpipe", "1f1b", "interleaved-1f1b", "zbv"):
        assert f"schedule {name}:" in out
    assert len(re.findall(r"^t +\| 0 ", out, re.M)) == 4  # a timeline per schedule (some in bands)
    assert max(map(len, out.splitlines())) <= 120
    doc = json.loads(run("--compare", "gpipe,1f1b,dualpipev", "-P", "4", "-M", "4",
                         "--format", "json").output)
    entries = {e["schedule"]: e for e in doc["compare"]}
    assert entries["gpipe"]["bubble"]["simulated"] == pytest.approx(3 / 7)
    assert "M >= 2P" in entries["dualpipev"]["skipped"]


def test_sweep_mode_with_skipped_rows():
    res = run("--schedule", "1f1b", "-P", "4", "--sweep-microbatches", "1,2,4,8,16,32")
    assert res.exit_code == 0
    out = res.output
    assert_plain(out)
    assert "skipped" not in out  # 1F1B runs any M (torch's class alone needs M >= P)
    assert "75.00%" in out and "42.86%" in out and "8.57%" in out
    doc = json.loads(run("--compare", "gpipe,1f1b,dualpipev", "-P", "4", "--sweep-microbatches",
                         "2,8", "--format", "json").output)
    rows = {(r["schedule"], r["M"]): r for r in doc["sweep"]}
    assert "skipped" in rows[("dualpipev", 2)] and "skipped" not in rows[("1f1b", 2)]
    assert rows[("gpipe", 8)]["bubble"]["theory"] == pytest.approx(3 / 11)
    assert rows[("gpipe", 8)]["peak_inflight"]["simulated_max"] == 8
    assert rows[("1f1b", 8)]["peak_inflight"]["theory_max"] == 4


def test_chrome_trace(tmp_path):
    path = tmp_path / "sim.json"
    res = run("--schedule", "1f1b", "-P", "2", "-M", "2", "--chrome-trace", str(path))
    assert res.exit_code == 0
    doc = json.loads(path.read_text())
    events = doc["traceEvents"]
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {"1f1b rank 0", "1f1b rank 1"}
    slices = [e for e in events if e["ph"] == "X"]
    assert len(slices) == 8
    assert {e["name"] for e in slices if e["pid"] == 1} == {"F0 s1", "F1 s1", "B0 s1", "B1 s1"}
    allowed = {"name", "cat", "ph", "ts", "dur", "pid", "tid", "args"}
    assert all(set(e) <= allowed for e in events)
    first = min(slices, key=lambda e: (e["pid"], e["ts"]))
    assert (first["ts"], first["dur"]) == (0, 1000)
    # two outputs of one path are refused before anything runs
    before = path.read_bytes()
    res = run("-P", "2", "-M", "2", "--chrome-trace", str(path), "--save-schedule", str(path))
    assert (res.exit_code, res.stdout) == (2, "")
    assert res.stderr == (f"pipeaudit: error: {path}: named for both --chrome-trace and "
                          "--save-schedule; give each output its own file\n")
    assert path.read_bytes() == before
    # compare writes all schedules, one process per (schedule, rank), over the file
    res = run("--compare", "gpipe,1f1b", "-P", "2", "-M", "2", "--chrome-trace", str(path))
    assert res.exit_code == 0
    pids = {e["pid"] for e in json.loads(path.read_text())["traceEvents"]}
    assert pids == {0, 1, 2, 3}


def test_schedule_file_round_trip(tmp_path):
    path = tmp_path / "mine.csv"
    res = run("--schedule", "zbv", "-P", "2", "-M", "4", "--save-schedule", str(path))
    assert res.exit_code == 0 and path.exists()
    doc = json.loads(run("--schedule-file", str(path), "--format", "json").output)
    assert doc["schedule"] == "file:mine.csv" and doc["matches_catalogue"] == ["zbv"]
    assert doc["bubble"]["theory"] is not None and doc["v"] == 2


def test_user_schedule_without_closed_form(tmp_path):
    # rank 1 runs its backwards in reverse: valid, but no catalogue schedule
    ranks = [["0F0", "0F1", "0F2", "0B0", "0B1", "0B2"], ["1F0", "1F1", "1F2", "1B2", "1B1", "1B0"]]
    path = tmp_path / "odd.json"
    path.write_text(json.dumps({"ranks": ranks}))
    res = run("--schedule-file", str(path))
    assert res.exit_code == 0
    assert "no catalogue match: no closed form" in res.output


def test_bad_schedule_file_is_one_line_exit_2(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("0F0,0B1\n")
    res = invoke("simulate", "--schedule-file", str(path))
    assert res.exit_code == 2
    err = res.stderr if hasattr(res, "stderr") else res.output
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and str(path) in lines[0] and lines[0].startswith("pipeaudit: error:")
    assert "Traceback" not in res.output


@pytest.mark.parametrize("args,fragment", [
    (["--schedule", "chimera", "-P", "4", "-M", "8"], "unknown schedule 'chimera'"),
    (["--schedule", "dualpipev", "-P", "4", "-M", "2"], "M >= 2P"),
    (["-M", "8"], "-P/--ranks is required"),
    (["-P", "4"], "-M/--microbatches is required"),
    (["-P", "4", "-M", "8", "--tw", "3"], "cannot exceed --tb"),
    (["-P", "4", "--sweep-microbatches", "1,x"], "comma-separated integers"),
    (["-P", "4", "--sweep-microbatches", "4", "--chrome-trace", "x.json"], "--chrome-trace"),
])
def test_usage_errors_exit_2(args, fragment):
    res = invoke("simulate", *args)
    assert res.exit_code == 2
    assert fragment in res.output
    assert "Traceback" not in res.output


def test_end_to_end_subprocess():
    env = repo_env()
    proc = subprocess.run(
        [sys.executable, "-m", "pipeaudit", "simulate", "--schedule", "gpipe", "-P", "2", "-M", "2",
         "--format", "json"],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["bubble"]["simulated"] == pytest.approx(1 / 3)


def test_docs_worked_example_is_current():
    doc = (DOCS / "schedules.md").read_text()
    after = doc.split("Worked example: `pipeaudit simulate --schedule 1f1b -P 4 -M 8`", 1)[1]
    block = after.split("```", 2)[1].strip("\n")
    assert run("--schedule", "1f1b", "-P", "4", "-M", "8").output.rstrip("\n") == block
