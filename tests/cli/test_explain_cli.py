"""`pipeaudit explain` and `pipeaudit whatif` through click's runner, plus one subprocess run."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.builders import build_run, one_f_one_b_orders
from tests.support.paths import REPO, SAMPLES
from tests.support.cli import invoke

IMB = SAMPLES / "1f1b_p4_m8_imb_s1x3"
P2 = SAMPLES / "1f1b_p2_m4"


def run(*args):
    return invoke(*args, catch_exceptions=False)


@pytest.fixture(scope="module")
def slow_stage_run(tmp_path_factory):
    dur = lambda s, k, m: (3 if s == 2 else 1) * (1000 if k == "F" else 2000)  # noqa: E731
    return build_run(tmp_path_factory.mktemp("cli"), one_f_one_b_orders(4, 8), dur=dur,
                     latency=100, steps=2).directory


def test_explain_json_has_the_documented_fields(slow_stage_run):
    res = run("explain", slow_stage_run, "--format", "json")
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert d["schema_version"] == 1 and d["tool"] == "pipeaudit explain"
    assert len(d["steps"]) == 2
    for s in d["steps"]:
        assert {"step", "step_time_us", "critical_path", "compute_share", "comm_share",
                "other_share", "slack"} <= set(s)
        for item in s["critical_path"]:
            assert {"rank", "stage", "kind", "microbatch", "start_us", "end_us",
                    "what"} <= set(item)
        assert s["compute_share"] + s["comm_share"] + s["other_share"] == pytest.approx(1.0)
        assert len(s["slack"]) == 64
    top = d["top_causes"]
    assert {"stage", "kind", "gain_us_if_10pct_faster"} <= set(top[0])
    assert (top[0]["stage"], top[0]["kind"]) == (2, "B")
    assert "comm_gain_us_if_10pct_faster" in d and "calibration" in d


def test_explain_text_and_markdown():
    res = run("explain", IMB)
    assert res.exit_code == 0, res.output
    out = res.output
    for want in ("Critical path of step", "compute", "communication", "host/launch gaps",
                 "Top causes", "Slack of step", "rank 3 |", "# critical compute"):
        assert want in out, want
    # the chain names the heavy stage's actions and the top cause is stage 1
    first = next(line for line in out.splitlines() if line.strip().startswith("1  "))
    assert first.split()[1] == "1"
    md = run("explain", IMB, "--format", "markdown", "--step", "1")
    assert md.exit_code == 0 and md.output.startswith("# pipeaudit explain")
    assert "## Critical path of step 1" in md.output and "| 1 |" in md.output


def test_whatif_json_and_text(slow_stage_run):
    res = run("whatif", slow_stage_run, "--scale", "2=0.3333", "--format", "json")
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert d["schema_version"] == 1 and d["tool"] == "pipeaudit whatif"
    assert {"step_time_us", "bubble"} <= set(d["measured"]) and {"step_time_us", "bubble"} <= set(
        d["predicted"])
    assert d["predicted"]["step_time_us"] < 0.6 * d["measured"]["step_time_us"]
    assert d["assumptions"] and d["changes"] == ["stage 2 x0.3333"]
    res = run("whatif", P2, "--microbatches", "8", "--format", "json")
    d = json.loads(res.output)
    assert d["predicted"]["num_microbatches"] == 8 and d["model"] == "typical values"
    assert abs(d["calibration"]["error"]) < 0.1
    assert any("M_old/M_new = 0.5" in a for a in d["assumptions"])
    text = run("whatif", P2, "--schedule", "gpipe").output
    assert "replayed:   gpipe P=2 M=4 v=1" in text and "calibration:" in text
    md = run("whatif", P2, "--schedule", "interleaved-1f1b", "--format", "markdown").output
    assert md.startswith("# pipeaudit whatif") and "## Assumptions" in md
    assert "split evenly" in md  # v 1 -> 2 re-derives the stages


@pytest.mark.parametrize("args,msg", [
    (["whatif", P2, "--scale", "x=1"], "STAGE[:KIND]=FACTOR"),
    (["whatif", P2, "--scale", "7=0.5"], "stages 0..1"),
    (["whatif", P2, "--scale", "1:Q=0.5"], "kind must be"),
    (["whatif", P2, "--scale", "1=0"], "> 0"),
    (["whatif", P2, "--scale", "1:W=0.5"], "runs no W actions (it runs B, F)"),
    (["whatif", P2, "--schedule", "nosuch"], "unknown schedule"),
    (["whatif", P2, "--schedule", "zbv", "--chunks", "3"], "exactly 2"),
    (["whatif", P2, "--comm-latency", "-5"], ">= 0"),
    (["explain", P2, "--step", "9"], "--step 9"),
    (["explain", REPO / "no_such_dir"], "no_such_dir"),
])
def test_bad_input_is_one_line_exit_2(args, msg):
    res = invoke(*args)
    assert res.exit_code == 2, res.output
    assert msg in res.output
    assert "Traceback" not in res.output


def test_trace_without_pipeline_is_named(tmp_path):
    trace = tmp_path / "rank0.json"
    trace.write_text(json.dumps({
        "distributedInfo": {"backend": "gloo", "rank": 0, "world_size": 1},
        "traceEvents": [{"ph": "X", "name": "aten::mm", "cat": "cpu_op", "ts": 10, "dur": 50,
                         "pid": 1, "tid": 1}]}))
    for cmd in ("explain", "whatif"):
        res = invoke(cmd, str(trace))
        assert res.exit_code == 2, res.output
        assert res.output.startswith(f"pipeaudit: error: {trace}: no pipeline stages found: ")
        assert len(res.output.strip().splitlines()) == 1


def test_output_file_overwritten(tmp_path):
    out = tmp_path / "r.json"
    out.write_text("old")
    res = invoke("whatif", str(P2), "-o", str(out), "--format", "json")
    assert res.exit_code == 0 and out.read_text().startswith("{")
    res = invoke("explain", str(P2), "-o", str(out), "--force")
    assert res.exit_code == 0 and "Critical path" in out.read_text()


def test_end_to_end_subprocess():
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    p = subprocess.run([sys.executable, "-m", "pipeaudit", "explain", str(P2), "--format", "json"],
                       capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["steps"]
    p = subprocess.run([sys.executable, "-m", "pipeaudit", "whatif", str(P2), "--scale", "0:B=2"],
                       capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "stage 0 B x2" in p.stdout
