"""`pipeaudit baseline` / `gate` through click's runner, on the bundled real traces."""

from __future__ import annotations

import json
import os
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.support.paths import SAMPLES
from tests.support.cli import invoke as _invoke

BASE_RUN = SAMPLES / "1f1b_p4_m8"
HEAVY_RUN = SAMPLES / "1f1b_p4_m8_imb_s1x3"
OTHER_RUN = SAMPLES / "gpipe_p4_m8"

# ::error title=...::message — properties escape , and : ; messages escape %, CR and LF
ANNOTATION = re.compile(r"^::(error|warning|notice)( [a-z]+=[^,:\r\n]*(,[a-z]+=[^,:\r\n]*)*)?::"
                        r"[^\r\n]*$")


def invoke(*args: str, env: dict | None = None):
    return _invoke(*args, catch_exceptions=False, env=env)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A cwd without pyproject.toml, so the repository's own config is not picked up."""
    d = tmp_path_factory.mktemp("gate")
    old = os.getcwd()
    os.chdir(d)
    yield d
    os.chdir(old)


@pytest.fixture(scope="module")
def baseline(workdir) -> Path:
    path = workdir / "baseline.json"
    r = invoke("baseline", BASE_RUN, "-o", path)
    assert r.exit_code == 0, r.output
    return path


@pytest.fixture(scope="module")
def heavy_snapshot(workdir) -> Path:
    """The heavier run stored once (gating a baseline file as the run skips re-parsing traces)."""
    path = workdir / "heavy.json"
    assert invoke("baseline", HEAVY_RUN, "-o", path).exit_code == 0
    return path


def test_baseline_document(baseline):
    doc = json.loads(baseline.read_text())
    assert doc["schema_version"] == 1 and doc["tool"] == "pipeaudit" and doc["kind"] == "baseline"
    assert doc["config"] == {"schedule": "1f1b", "num_ranks": 4, "num_stages": 4,
                             "num_microbatches": 8, "num_chunks": 1, "world_size": 4}
    assert doc["audit"]["schema_version"] == 1 and doc["audit"]["num_steps"] == 2
    assert len(doc["series"]["step_time_us"]) == 2
    assert set(doc["series"]["stage_compute_us"]) == {"0", "1", "2", "3"}


def test_baseline_overwrites_its_output(baseline, workdir):
    copy = workdir / "again.json"
    copy.write_bytes(baseline.read_bytes())
    r = invoke("baseline", BASE_RUN, "-o", copy)  # as cp does: a second run exits 0
    assert r.exit_code == 0, r.output
    assert json.loads(copy.read_text())["config"] == json.loads(baseline.read_text())["config"]


def test_run_gated_against_itself_passes(baseline):
    r = invoke("gate", BASE_RUN, "--baseline", baseline)
    assert r.exit_code == 0, r.output
    assert "PASS: 0 failed" in r.stdout
    assert "FAIL" not in r.stdout


def test_heavier_stage_fails_and_is_named(baseline):
    r = invoke("gate", HEAVY_RUN, "--baseline", baseline)
    assert r.exit_code == 1, r.output
    why = r.stdout.split("Why:")[1]
    assert re.search(r"FAIL\s+stage 1 compute per step \+\d+\.\d% \(F \+\d+%, B \+\d+%\): "
                     r"stage 1 got heavier", why), why
    assert "stage 0 compute" not in why and "stage 2 compute" not in why
    assert "rank 0 waits longer on stage 1" in why
    assert r.stdout.rstrip().splitlines()[-1].startswith("FAIL:")


def test_json_report(baseline, heavy_snapshot):
    r = invoke("gate", heavy_snapshot, "--baseline", baseline, "--format", "json")
    assert r.exit_code == 1
    doc = json.loads(r.stdout)
    assert doc["schema_version"] == 1 and doc["kind"] == "gate" and doc["verdict"] == "fail"
    failed = [c for c in doc["checks"] if c["verdict"] == "fail"]
    assert {(c["metric"], c["index"]) for c in failed if c["scope"] == "stage"} == \
        {("stage_compute", 1)}
    for c in doc["checks"]:
        assert set(c) >= {"metric", "scope", "baseline", "now", "change", "threshold", "verdict",
                          "explanation", "name", "limit", "noise"}


def test_junit_is_valid_xml_with_one_failure_per_failed_check(baseline, heavy_snapshot, workdir):
    out = workdir / "gate.xml"
    r = invoke("gate", heavy_snapshot, "--baseline", baseline, "--format", "junit", "-o", out)
    assert r.exit_code == 1
    root = ET.parse(out).getroot()
    doc = json.loads(invoke("gate", heavy_snapshot, "--baseline", baseline,
                            "--format", "json").stdout)
    n_fail = sum(c["verdict"] == "fail" for c in doc["checks"])
    suite = root.find("testsuite")
    cases = suite.findall("testcase")
    assert len(cases) == len(doc["checks"]) == int(suite.get("tests"))
    failures = [f for tc in cases for f in tc.findall("failure")]
    assert len(failures) == n_fail == int(suite.get("failures")) > 0
    assert all(len(tc.findall("failure")) <= 1 for tc in cases)
    stage1 = next(tc for tc in cases if tc.get("name") == "stage 1 compute per step")
    assert "stage 1 got heavier" in stage1.find("failure").get("message")


def test_github_annotations_and_step_summary(baseline, heavy_snapshot, workdir):
    summary = workdir / "summary.md"
    summary.write_text("# earlier step\n")
    r = invoke("gate", heavy_snapshot, "--baseline", baseline, "--format", "github",
               env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert r.exit_code == 1
    lines = r.stdout.splitlines()
    assert lines and all(ANNOTATION.match(line) for line in lines), lines
    errors = [line for line in lines if line.startswith("::error")]
    assert any("title=pipeaudit gate%3A stage 1 compute per step::" in e for e in errors)
    text = summary.read_text()
    assert text.startswith("# earlier step\n")  # appended, not overwritten
    assert "## pipeaudit gate: ❌ FAIL" in text and "| check | baseline | now |" in text


def test_markdown_and_exit_zero(baseline, heavy_snapshot):
    r = invoke("gate", heavy_snapshot, "--baseline", baseline, "--format", "markdown",
               "--exit-zero")
    assert r.exit_code == 0
    assert r.stdout.startswith("## pipeaudit gate: ❌ FAIL")
    assert "stage 1 got heavier" in r.stdout


def test_thresholds_from_options_override_pyproject(baseline, heavy_snapshot, workdir):
    proj = workdir / "proj" / "sub"
    proj.mkdir(parents=True)
    (workdir / "proj" / "pyproject.toml").write_text(
        "[project]\nname = 'x'\n\n[tool.pipeaudit.gate]\nmax_stage_compute_increase = \"off\"\n"
        "max_bubble_increase = 0.5\nmax-imbalance-increase = \"off\"\nmax_rank_bubble_increase "
        "= 1.0\n")
    os.chdir(proj)
    try:
        r = invoke("gate", heavy_snapshot, "--baseline", baseline, "--format", "json")
        doc = json.loads(r.stdout)
        assert r.exit_code == 0, [c["explanation"] for c in doc["checks"] if c["verdict"] == "fail"]
        assert doc["thresholds_file"].endswith("pyproject.toml")
        assert doc["thresholds"]["max_bubble_increase"] == 0.5
        # an option overrides the file
        r = invoke("gate", heavy_snapshot, "--baseline", baseline, "--max-stage-compute-increase",
                   "15%")
        assert r.exit_code == 1 and "stage 1 got heavier" in r.stdout
        # --no-config ignores the file: defaults apply again
        assert invoke("gate", heavy_snapshot, "--baseline", baseline, "--no-config").exit_code == 1
    finally:
        os.chdir(workdir)


def test_config_file_option(baseline, heavy_snapshot, workdir):
    cfg = workdir / "gate.toml"
    cfg.write_text("[tool.pipeaudit.gate]\nmax_bubble = 0.2\n")
    r = invoke("gate", heavy_snapshot, "--config", cfg)
    assert r.exit_code == 1 and "over the budget 20.0%" in r.stdout
    cfg.write_text("max_bubble = 0.9\nmax_bubble_over_theory = '50%'\n")
    assert invoke("gate", heavy_snapshot, "--config", cfg).exit_code == 0


def test_budgets_without_baseline(heavy_snapshot):
    r = invoke("gate", heavy_snapshot, "--max-bubble", "0.25", "--max-bubble-over-theory", "0.05")
    assert r.exit_code == 1
    assert "budget: pipeline bubble" in r.stdout and "above theory" in r.stdout
    assert "(P-1)/(M+P-1)" in r.stdout
    assert invoke("gate", heavy_snapshot, "--max-bubble", "0.6", "--max-step-time-ms", "2000",
                  "--max-imbalance", "2.5").exit_code == 0


def _one_line_error(r, *needles):
    assert r.exit_code == 2, r.output
    err = r.stderr.strip()
    assert "\n" not in err and "Traceback" not in r.output, r.output
    assert err.startswith("pipeaudit: error: ")
    for n in needles:
        assert n in err, err
    return err


@pytest.mark.parametrize("content,problem", [
    (b"this is not json", "not valid JSON"),
    (b'{"schema_version": 1, "tool": "pipeaudit", "kind": "baseline", "config"', "not valid JSON"),
    (b"[1, 2, 3]", "expected a JSON object"),
    (b'{"hello": "world"}', "not a pipeaudit baseline"),
    (b'{"schema_version": 1, "tool": "pipeaudit", "kind": "baseline"}', "damaged baseline"),
    (b'{"schema_version": 7, "tool": "pipeaudit", "kind": "baseline"}', "schema_version 7"),
])
def test_damaged_baseline_exits_2(workdir, heavy_snapshot, content, problem):
    bad = workdir / "bad.json"
    bad.write_bytes(content)
    _one_line_error(invoke("gate", heavy_snapshot, "--baseline", bad), str(bad), problem)


def test_baseline_with_wrong_types_or_lengths(workdir, baseline, heavy_snapshot):
    doc = json.loads(baseline.read_text())
    doc["config"]["num_ranks"] = "four"
    bad = workdir / "types.json"
    bad.write_text(json.dumps(doc))
    _one_line_error(invoke("gate", heavy_snapshot, "--baseline", bad), str(bad), "num_ranks")
    doc = json.loads(baseline.read_text())
    doc["series"]["bubble"] = doc["series"]["bubble"][:1]
    bad.write_text(json.dumps(doc))
    _one_line_error(invoke("gate", heavy_snapshot, "--baseline", bad), str(bad), "series.bubble")


def test_analyze_report_is_not_a_baseline(workdir, heavy_snapshot):
    report = workdir / "analyze.json"
    assert invoke("analyze", BASE_RUN, "--format", "json", "-o", report).exit_code == 0
    _one_line_error(invoke("gate", heavy_snapshot, "--baseline", report), str(report),
                    "pipeaudit baseline")


def test_missing_baseline_and_nothing_to_check(workdir, heavy_snapshot):
    _one_line_error(invoke("gate", heavy_snapshot, "--baseline", workdir / "nope.json"),
                    "nope.json", "cannot read")
    _one_line_error(invoke("gate", heavy_snapshot), "nothing to check")


def test_bad_threshold_values_exit_2(baseline, heavy_snapshot, workdir):
    _one_line_error(invoke("gate", heavy_snapshot, "--baseline", baseline, "--max-bubble-increase",
                           "lots"), "--max-bubble-increase", "lots")
    _one_line_error(invoke("gate", heavy_snapshot, "--baseline", baseline, "--max-step-time-ms",
                           "5%"), "--max-step-time-ms", "not a percentage")
    cfg = workdir / "typo.toml"
    cfg.write_text("max_bubbel = 0.1\n")
    _one_line_error(invoke("gate", heavy_snapshot, "--baseline", baseline, "--config", cfg),
                    str(cfg), "unknown key 'max_bubbel'")
    cfg.write_text("max_bubble = [0.1\n")
    _one_line_error(invoke("gate", heavy_snapshot, "--baseline", baseline, "--config", cfg),
                    str(cfg), "not valid TOML")


@pytest.fixture(scope="module")
def other_baseline(workdir) -> Path:
    path = workdir / "gpipe.json"
    assert invoke("baseline", OTHER_RUN, "-o", path).exit_code == 0
    return path


def test_mismatched_baseline_refused_unless_allowed(other_baseline, heavy_snapshot):
    err = _one_line_error(invoke("gate", heavy_snapshot, "--baseline", other_baseline),
                          str(other_baseline), "schedule gpipe -> 1f1b", "--allow-config-change")
    assert "configuration differs" in err
    r = invoke("gate", heavy_snapshot, "--baseline", other_baseline, "--allow-config-change",
               "--format", "json")
    assert r.exit_code in (0, 1), r.output
    doc = json.loads(r.stdout)
    assert doc["config_changes"] == ["schedule gpipe -> 1f1b"]
    assert any("configuration changed" in n for n in doc["notes"])
    # 1f1b holds fewer microbatches in flight than gpipe: no in-flight regression
    inflight = [c for c in doc["checks"] if c["metric"] == "peak_inflight"]
    assert len(inflight) == 4 and all(c["verdict"] == "pass" for c in inflight)


def test_output_file_overwritten_but_never_an_input(baseline, heavy_snapshot, workdir):
    out = workdir / "report.txt"
    out.write_text("old")
    assert invoke("gate", heavy_snapshot, "--baseline", baseline, "-o", out).exit_code == 1
    assert "stage 1 got heavier" in out.read_text()
    before = baseline.read_bytes()
    _one_line_error(invoke("gate", heavy_snapshot, "--baseline", baseline, "-o", baseline),
                    "is an input of this command")
    assert baseline.read_bytes() == before


def test_input_traces_untouched(baseline, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(BASE_RUN, run)
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    assert invoke("gate", run, "--baseline", baseline).exit_code == 0
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before


def test_terminal_rendering_is_rich_and_plain_otherwise(baseline, heavy_snapshot):
    from pipeaudit.gate import gate, load_thresholds, read_document
    from pipeaudit.report.gate_text import render_gate_text

    result = gate(read_document(heavy_snapshot), read_document(baseline, baseline_only=True),
                  load_thresholds(search=False)[0])
    rich_text = render_gate_text(result, color=True)
    plain = render_gate_text(result, color=False)
    assert "\x1b[" in rich_text and "\x1b[" not in plain  # colours on a terminal only
    assert re.sub(r"\x1b\[[0-9;]*m", "", rich_text) == plain  # one layout, one table style
    for text in (rich_text, plain):
        assert "stage 1 compute per step" in text and "FAIL" in text
    lines = plain.splitlines()
    assert max(map(len, lines)) <= 120
    noisy = result.noisy_line()
    head = next(i for i, line in enumerate(lines) if line.startswith("pipeaudit gate"))
    # the noisy-baseline line first, wrapped with a hanging indent
    assert " ".join(line.strip() for line in lines[:head]) == (f"pipeaudit: {noisy}" if noisy else "")
    at = next(i for i, line in enumerate(lines) if line.startswith("check"))
    assert set(lines[at + 1]) == {"-"}  # the rule under the header
    header = lines[at].split()
    assert header == ["check", "baseline", "now", "change", "threshold", "verdict"]
