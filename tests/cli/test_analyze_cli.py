"""`pipeaudit analyze` through click's runner, plus one end-to-end subprocess run."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tests.support.builders import build_run, one_f_one_b_orders
from tests.support.paths import HTA, SAMPLES
from tests.support.cli import invoke

SAMPLE = SAMPLES / "1f1b_p4_m8"


def run(*args):
    return invoke(*args, catch_exceptions=False)


def test_json_has_the_documented_fields():
    res = run("analyze", SAMPLE, "--format", "json")
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    for key in ("schema_version", "schedule", "num_ranks", "num_stages", "num_microbatches",
                "num_steps", "actions_inferred", "ranks", "stages", "bubble", "findings"):
        assert key in d, key
    assert d["schema_version"] == 1 and d["schedule"] == "1f1b" and d["num_ranks"] == 4
    for r in d["ranks"]:
        for key in ("rank", "stages", "bubble", "idle_fraction", "compute_us", "window_us",
                    "comm_us", "exposed_comm_us", "peak_allocated_bytes"):
            assert key in r, key
        assert 0 <= r["bubble"] <= 1
    for s in d["stages"]:
        assert set(s["actions"]) == {"F", "B", "I", "W"}
        assert s["actions"]["F"] == 16 and s["actions"]["B"] == 16  # 8 microbatches x 2 steps
        assert {"peak_inflight", "expected_peak_inflight", "compute_us"} <= set(s)
    assert set(d["bubble"]) >= {"measured", "theory", "theory_formula", "replay_ideal"}
    assert d["bubble"]["theory"] == pytest.approx(3 / 11)
    for f in d["findings"]:
        assert set(f) >= {"code", "severity", "rank", "stage", "measured", "expected", "message"}


def test_text_report_shows_summary_timeline_and_findings():
    res = run("analyze", SAMPLES / "1f1b_p4_m8_imb_s1x3")
    assert res.exit_code == 0
    out = res.output
    assert "Pipeline bubble" in out and "Stages (" not in out and "Ranks (" not in out
    assert "published:" not in out
    assert re.search(r"^rank 3 +\|[^|]*B7[^|]*\|$", out, re.M)  # the ASCII timeline
    assert "STAGE_IMBALANCE" in out and "\x1b[" not in out  # no colour when not a terminal
    assert out.splitlines()[-1] == ("--verbose adds stage and rank tables, the published "
                                    "formulas; --html FILE writes it all as a page")
    lines = out.splitlines()
    assert len(lines) <= 50 and max(map(len, lines)) <= 120, (len(lines), max(map(len, lines)))
    full = run("analyze", SAMPLES / "1f1b_p4_m8_imb_s1x3", "--verbose").output
    assert "Stages (" in full and "Ranks (" in full and "published: (PP-1)(F+B)" in full
    assert "--verbose adds" not in full and len(full.splitlines()) > len(lines)


def test_markdown_report():
    res = run("analyze", SAMPLE, "--format", "markdown")
    assert res.exit_code == 0
    assert res.output.startswith("# pipeaudit report")
    assert "| stage | rank |" in res.output and "```" in res.output


def test_output_file_overwritten_as_cp_does(tmp_path):
    out = tmp_path / "r.json"
    assert run("analyze", SAMPLE, "--format", "json", "-o", out).exit_code == 0
    out.write_text("old")
    assert run("analyze", SAMPLE, "--format", "json", "-o", out).exit_code == 0
    assert out.read_text().startswith("{")
    assert run("analyze", SAMPLE, "--format", "json", "-o", out, "--force").exit_code == 0


def test_action_pattern_for_other_frameworks(tmp_path):
    built = build_run(tmp_path, one_f_one_b_orders(2, 4))
    for f in built.files:  # rename PP:0F1 -> "myfw stage=0 fwd mb=1"
        text = re.sub(r'"PP:(\d+)([FB])(\d+)"',
                      lambda m: f'"myfw stage={m[1]} {"fwd" if m[2] == "F" else "bwd"} mb={m[3]}"',
                      f.read_text())
        f.write_text(text)
    plain = json.loads(run("analyze", built.directory, "--format", "json").output)
    # without a pattern the span family is found: stage, kind word and microbatch in place
    assert not plain["actions_inferred"] and plain["num_microbatches"] == 4
    assert [s["actions"]["F"] for s in plain["stages"]] == [4, 4]
    assert any("spans named like myfw stage={stage} {fwd|bwd} mb={mb} (detected" in n
               for n in plain["notes"])
    res = run("analyze", built.directory, "--format", "json", "--action-pattern",
              r"myfw stage=(?P<stage>\d+) (?P<kind>fwd|bwd) mb=(?P<mb>\d+)")
    d = json.loads(res.output)
    assert not d["actions_inferred"] and d["num_microbatches"] == 4
    assert [s["actions"]["F"] for s in d["stages"]] == [4, 4]
    bad = run("analyze", built.directory, "--action-pattern", "(?P<kind>x)")
    assert bad.exit_code == 2 and "named groups" in bad.output


@pytest.mark.skipif(not HTA.exists(), reason="shared GPU traces not present")
@pytest.mark.parametrize("name", ["nccl128_sampled_rank0.json.gz", "a100_ddp_ws2_rank0.json.gz",
                                  "v100_ws2_rank1_with_memory.json.gz",
                                  "v100_ddp_ns_resolution.pt.trace.json.gz",
                                  "amd_mi250_no_rank.json.gz"])
def test_real_gpu_traces_busy_and_idle(name):
    res = run("analyze", HTA / name, "--format", "json")
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    # the one no-pipeline line every command gives; analyze goes on with per-rank figures
    assert res.stderr.startswith(f"pipeaudit: note: {HTA / name}: no pipeline stages found: 1 trace, ")
    assert res.stderr.count("\n") == 1
    assert not d["pipeline_found"] and d["device_type"] in ("cuda", "rocm")
    assert d["findings"][0]["code"] == "NO_PIPELINE"
    r = d["ranks"][0]
    assert 0 < r["idle_fraction"] < 1 and r["busy_us"] > 0 and r["span_us"] > r["busy_us"]


@pytest.mark.skipif(not HTA.exists(), reason="shared GPU traces not present")
def test_nccl128_rank0_idle_matches_design_figure():
    d = json.loads(run("analyze", HTA / "nccl128_sampled_rank0.json.gz", "--format", "json").stdout)
    assert d["ranks"][0]["idle_fraction"] == pytest.approx(0.552, abs=0.001)  # whole trace
    assert d["ranks"][0]["comm_us"] > 0


def test_not_a_trace_is_one_line_exit_2(tmp_path):
    bad = tmp_path / "rank0.json"
    bad.write_text("[1, 2, 3]")
    res = invoke("analyze", str(bad))
    assert res.exit_code == 2
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and str(bad) in lines[0] and "Traceback" not in res.output


def test_end_to_end_subprocess(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pipeaudit", "analyze", str(SAMPLE), "--format",
                           "json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["num_stages"] == 4
    missing = subprocess.run([sys.executable, "-m", "pipeaudit", "analyze", str(tmp_path / "nope")],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "nope" in missing.stderr


def test_timeline_caption_names_the_step_drawn_and_the_median():
    """Two steps: the median step time is their mean; the timeline draws the shorter one and
    says both times (the numbers come from the JSON report of the same run)."""
    d = json.loads(run("analyze", SAMPLE, "--format", "json").output)
    times = sorted((s["step_time_us"], s["step"]) for s in d["steps"])
    assert len(times) == 2
    (short_us, short), (long_us, _) = times
    text = run("analyze", SAMPLE).output
    m = re.search(r"Timeline of step (\d+) \(([0-9.]+) ms, the shorter of the two middle steps; "
                  r"their mean is the median step time, ([0-9.]+) ms\)", text)
    assert m, text
    assert int(m[1]) == short
    assert float(m[2]) == pytest.approx(short_us / 1000, abs=0.006)
    assert float(m[3]) == pytest.approx((short_us + long_us) / 2000, abs=0.006)
    md = run("analyze", SAMPLE, "--format", "markdown").output
    assert f"## Timeline of step {short}\n\n{m[2]} ms, the shorter of the two middle steps" in md


def test_timeline_caption_with_an_odd_number_of_steps(tmp_path):
    """Three steps of 1x, 3x and 2x the durations: the median step is the 2x one, drawn and
    named as such with its own time."""
    scale = {0: 1, 1: 3, 2: 2}
    built = build_run(tmp_path, one_f_one_b_orders(2, 4), steps=3,
                      step_dur=lambda st, s, k, m: scale[st] * {"F": 1000, "B": 2000}[k])
    d = json.loads(run("analyze", built.directory, "--format", "json").output)
    median = sorted(d["steps"], key=lambda s: s["step_time_us"])[1]
    text = run("analyze", built.directory).output
    m = re.search(r"Timeline of step (\d+) \(the median step, ([0-9.]+) ms\)", text)
    assert m, text
    assert int(m[1]) == median["step"] == 2
    assert float(m[2]) == pytest.approx(median["step_time_us"] / 1000, abs=0.006)


def test_header_names_the_directory_once(tmp_path):
    text = run("analyze", SAMPLE).output
    assert text.splitlines()[0] == (f"pipeaudit analyze  {SAMPLE}/ (4 traces: rank0.json.gz ... "
                                    "rank3.json.gz)")
    # a directory whose name looks like rich markup is printed as it is
    odd = tmp_path / "run[bold]"
    odd.mkdir()
    for f in SAMPLE.iterdir():
        (odd / f.name).write_bytes(f.read_bytes())
    assert run("analyze", odd).output.splitlines()[0].startswith(f"pipeaudit analyze  {odd}/ (4 traces")


def test_inputs_line_shapes():
    from pipeaudit.report.formatting import inputs_line

    assert inputs_line(["a/x.json"]) == "a/x.json"
    assert inputs_line(["d/r0.json", "d/r1.json"]) == "d/ (2 traces: r0.json, r1.json)"
    assert inputs_line([f"d/r{i}" for i in range(8)]) == "d/ (8 traces: r0 ... r7)"
    assert inputs_line(["a/x.json", "b/y.json"]) == "a/x.json, b/y.json"
    assert inputs_line([f"d{i}/r" for i in range(6)]) == "d0/r, d1/r, d2/r, d3/r (+2 more)"
