"""``pipeaudit sweep`` without a training run: a saved sweep's report, refusals, usage errors."""

from __future__ import annotations

import json

import pytest

from pipeaudit.errors import ConfigError
from pipeaudit.sweep import SweepConfig, SweepResult, load, run_sweep, save
from pipeaudit.sweep.results import JSON_NAME
from tests.support.cli import invoke
from tests.unit.sweep.test_sweep_unit import _records


def _sweep(*args):
    return invoke("sweep", *args)


@pytest.mark.parametrize("content,problem", [
    (None, "not found"),
    ("{not json", "not valid JSON"),
    ('{"tool": "other"}', "not a pipeaudit sweep result"),
    ('{"tool": "pipeaudit sweep", "schema_version": 9, "records": []}', "schema_version 9"),
    ('{"tool": "pipeaudit sweep", "schema_version": 1, "records": [{"key": 1}]}', "malformed records"),
])
def test_report_of_a_bad_sweep_dir_is_one_line_exit_2(tmp_path, content, problem):
    if content is not None:
        (tmp_path / JSON_NAME).write_text(content)
    res = _sweep("--report", str(tmp_path))
    assert res.exit_code == 2
    assert res.output.count("\n") == 1 and problem in res.output and "Traceback" not in res.output
    assert str(tmp_path / JSON_NAME) in res.output


def test_report_renders_table_and_plots(tmp_path):
    pytest.importorskip("matplotlib")
    save(SweepResult(options={"steps": 2, "warmup_steps": 1, "model": {"layers": 2, "hidden": 64}},
                     records=_records()), tmp_path)
    res = invoke("sweep", "--report", str(tmp_path))
    assert res.exit_code == 0, res.output
    assert "gpipe_p2_m4" in res.stdout and "skipped 1f1b_p2_m1: schedule 1f1b needs" in res.stdout
    assert "(P-1)/(M+P-1)" in res.stdout
    for name in ("bubble_vs_m.png", "step_time_vs_m.png", "memory_vs_m.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    js = invoke("sweep", "--report", str(tmp_path), "--format", "json", "--no-plots")
    assert json.loads(js.stdout)["records"][0]["key"] == "gpipe_p2_m1"
    csv = invoke("sweep", "--report", str(tmp_path), "--format", "csv", "--no-plots")
    assert csv.stdout.splitlines()[0].startswith("key,")


# --------------------------------------------------------------- out dir and options
def test_non_empty_out_is_refused_without_force(tmp_path):
    (tmp_path / "something").write_text("x")
    res = _sweep("--schedules", "gpipe", "-M", "2", "--out", str(tmp_path))
    assert res.exit_code == 2 and "--out is not empty" in res.output and "--force" in res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["something"]


@pytest.mark.parametrize("args,problem", [
    ([], "--out DIR is required"),
    (["--report", "x", "--out", "y"], "do not combine"),
    (["--out", "y", "--resume", "--force"], "do not go together"),
    (["--out", "y", "--schedules", "nope"], "unknown schedule 'nope'"),
    (["--out", "y", "-P", "2,a"], "--ranks expects comma-separated integers"),
])
def test_cli_usage_errors(tmp_path, args, problem):
    res = invoke("sweep", *args)
    assert res.exit_code == 2 and problem in res.output and "Traceback" not in res.output


def test_resume_with_different_run_options_is_refused(tmp_path):
    save(SweepResult(options={"steps": 2, "warmup_steps": 1}, records=[]), tmp_path)
    cfg = SweepConfig(out=str(tmp_path), schedules=("gpipe",), stages=(2,), microbatches=(2,),
                      steps=3, resume=True)
    with pytest.raises(ConfigError, match="steps 2 -> 3"):
        run_sweep(cfg, runner=lambda c: pytest.fail("must not run"))


def test_all_skipped_sweep_writes_results_without_running(tmp_path):
    out = tmp_path / "s"
    cfg = SweepConfig(out=str(out), schedules=("1f1b",), stages=(4,), microbatches=(1, 2))
    res = run_sweep(cfg, runner=lambda c: pytest.fail("nothing valid to run"))
    assert [r.status for r in res.records] == ["skipped", "skipped"]
    assert load(out).records == res.records
    assert not (out / "runs").exists()
