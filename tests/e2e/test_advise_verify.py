"""``pipeaudit advise --verify``: real reruns of the measured configuration and the best
candidate, predicted against measured (the accuracy itself is measured by
``benchmarks/advise_accuracy.py`` on a quiet machine, not asserted here)."""

from __future__ import annotations

import json

import pytest

from tests.support.cli import invoke

pytest.importorskip("torch")
pytestmark = pytest.mark.slow


def test_verify_reruns_and_reports(tmp_path):
    base = tmp_path / "base"
    res = invoke("profile", "-P", "2", "-M", "4", "--layers", "4", "--hidden", "64",
                 "--seq-len", "8", "--steps", "2", "--profile-memory", "--out", base)
    assert res.exit_code == 0, res.output
    res = invoke("advise", base, "--schedules", "1f1b,interleaved-1f1b", "--microbatches", "2,4",
                 "--verify", "1", "--out", tmp_path / "reruns", "--format", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    rows = doc["verified"]
    assert len(rows) == 2 and rows[0]["is_measured_configuration"]
    for row in rows:
        assert row["measured_step_time_us"] > 0 and row["measured_peak_memory_bytes"] > 0
        assert row["predicted_peak_memory_bytes"] > 0
        assert (tmp_path / "reruns" / f"{row['schedule']}_v{row['chunks']}_m{row['microbatches']}"
                / "manifest.json").exists()
    # calibrated: every candidate predicted again from the rerun of the measured configuration,
    # as advise predicts from that rerun itself
    base_rerun = tmp_path / "reruns" / f"{rows[0]['schedule']}_v1_m{rows[0]['microbatches']}"
    res = invoke("advise", base_rerun, "--schedules", "1f1b,interleaved-1f1b", "--microbatches",
                 "2,4", "--format", "json")
    assert res.exit_code == 0, res.output
    again = {(c["schedule"], c["chunks"], c["microbatches"]): c["predicted_step_time_us"]
             for c in json.loads(res.stdout)["candidates"]}
    for row in rows:
        key = (row["schedule"], row["chunks"], row["microbatches"])
        assert row["calibrated_predicted_step_time_us"] == pytest.approx(again[key])
        assert row["error"] == pytest.approx(
            row["measured_step_time_us"] / row["calibrated_predicted_step_time_us"] - 1.0)
        assert row["error_raw"] == pytest.approx(
            row["measured_step_time_us"] / row["predicted_step_time_us"] - 1.0)
    # the measured configuration's memory is its own: the model reproduces it
    assert rows[0]["memory_error"] == pytest.approx(0.0, abs=0.05)
    # a hand-made rerun held to the prediction
    other = rows[1]
    res = invoke("advise", base, tmp_path / "reruns" /
                 f"{other['schedule']}_v{other['chunks']}_m{other['microbatches']}", "--check",
                 "--schedules", "1f1b,interleaved-1f1b", "--microbatches", "2,4", "--format", "json")
    assert res.exit_code == 0, res.output
    checked = json.loads(res.stdout)["verified"][0]
    assert (checked["schedule"], checked["microbatches"]) == (other["schedule"], other["microbatches"])
