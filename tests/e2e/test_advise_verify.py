"""``pipeaudit advise --verify``: real reruns of the measured configuration and the best
candidate, predicted against measured (the accuracy itself is measured by
``benchmarks/advise_accuracy.py`` on a quiet machine, not asserted here)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from pipeaudit.advise.advise import order_band
from tests.support.cli import invoke

pytest.importorskip("torch")
pytestmark = pytest.mark.slow


def test_verify_reruns_and_reports(tmp_path):
    base = tmp_path / "base"
    res = invoke("profile", "-P", "2", "-M", "4", "--layers", "4", "--hidden", "64",
                 "--seq-len", "8", "--steps", "2", "--profile-memory", "--out", base)
    assert res.exit_code == 0, res.output
    res = invoke("advise", base, "--schedules", "1f1b,interleaved-1f1b", "--microbatches", "2,4",
                 "--no-split-search", "--verify", "1", "--repeat", "2", "--out",
                 tmp_path / "reruns", "--format", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    rows = doc["verified"]
    assert len(rows) == 2 and rows[0]["is_measured_configuration"]
    for row in rows:
        assert row["measured_step_time_us"] > 0 and row["measured_peak_memory_bytes"] > 0
        assert row["predicted_peak_memory_bytes"] > 0
        folder = tmp_path / "reruns" / f"{row['schedule']}_v{row['chunks']}_m{row['microbatches']}"
        assert all((folder / r / "manifest.json").exists() for r in ("r1", "r2"))
        # two runs each; the lower middle of two (the faster) stands for the configuration
        times = row["measured_step_times_us"]
        assert len(times) == 2 and row["measured_step_time_us"] == min(times)
        assert row["trace"].startswith(str(folder))
    assert any("ran 2 times" in n for n in doc["notes"])
    # calibrated: every candidate predicted again from the rerun of the measured configuration,
    # as advise predicts from that rerun itself
    base_rerun = rows[0]["trace"]
    res = invoke("advise", base_rerun, "--schedules", "1f1b,interleaved-1f1b", "--microbatches",
                 "2,4", "--no-split-search", "--format", "json")
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
    # the advice proven by the reruns: the fastest of them (no cap: all fit)
    fastest = min(rows, key=lambda r: r["measured_step_time_us"])
    proven = doc["proven"]
    assert (proven["schedule"], proven["microbatches"]) == (fastest["schedule"],
                                                            fastest["microbatches"])
    assert proven["speedup"] == pytest.approx(rows[0]["measured_step_time_us"] /
                                              fastest["measured_step_time_us"])
    # the measured configuration's memory is its own: the model reproduces it
    assert rows[0]["memory_error"] == pytest.approx(0.0, abs=0.05)
    # a hand-made rerun held to the prediction
    other = rows[1]
    res = invoke("advise", base, other["trace"], "--check", "--no-split-search",
                 "--schedules", "1f1b,interleaved-1f1b", "--microbatches", "2,4", "--format", "json")
    assert res.exit_code == 0, res.output
    checked = json.loads(res.stdout)["verified"][0]
    assert (checked["schedule"], checked["microbatches"]) == (other["schedule"], other["microbatches"])


def test_verify_auto_reruns_in_learned_order_until_none_is_close(tmp_path):
    """``--verify auto`` reruns first the candidate predicted fastest from the rerun of the
    measured configuration, corrects later predictions by what its reruns measured, stops
    once nothing left is predicted within the order band of the fastest measured, and the
    advice it proves is the fastest rerun that fits the cap when run."""
    base = tmp_path / "base"
    res = invoke("profile", "-P", "2", "-M", "4", "--layers", "4", "--hidden", "64",
                 "--seq-len", "8", "--steps", "2", "--profile-memory", "--out", base)
    assert res.exit_code == 0, res.output
    flags = ["--schedules", "gpipe,1f1b,interleaved-1f1b", "--microbatches", "2,4",
             "--no-split-search"]
    res = invoke("advise", base, *flags, "--format", "json")
    assert res.exit_code == 0, res.output
    plain = json.loads(res.stdout)
    cap = sorted(c["predicted_peak_memory_bytes"] for c in plain["candidates"])[-2]
    res = invoke("advise", base, *flags, "--memory-cap", str(cap), "--format", "json")
    ranked = json.loads(res.stdout)
    key = lambda c: (c["schedule"], c["chunks"], c["microbatches"])  # noqa: E731
    fitting = {key(c) for c in ranked["candidates"]
               if c["fits"] and not c["is_measured_configuration"]}
    res = invoke("advise", base, *flags, "--memory-cap", str(cap), "--verify", "auto",
                 "--out", tmp_path / "reruns", "--format", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    rows = doc["verified"]
    assert rows[0]["is_measured_configuration"] and len(rows) >= 2
    assert {key(r) for r in rows[1:]} <= fitting
    # calibrated: predicted from the rerun of the measured configuration
    res = invoke("advise", rows[0]["trace"], *flags, "--format", "json")
    again = {key(c): c["predicted_step_time_us"] for c in json.loads(res.stdout)["candidates"]}
    assert again[key(rows[1])] == min(again[k] for k in fitting)  # the first: best predicted
    assert rows[1]["learned_predicted_step_time_us"] == pytest.approx(again[key(rows[1])])
    factors = [1.0]
    for i, r in enumerate(rows[1:], start=1):
        assert r["calibrated_predicted_step_time_us"] == pytest.approx(again[key(r)])
        # learned from the reruns before it of its chunk count (the measured run's is 1; a
        # v = 2 candidate takes v = 1's curve until a v = 2 rerun): the median at its M; with
        # none there, the measured M = 4's (1 until a rerun at M = 4), the nearest size run
        # (no extrapolation)
        ratio = {}
        for before in rows[1:i]:
            ratio.setdefault((before["microbatches"], before["chunks"]), []).append(
                before["measured_step_time_us"] / before["calibrated_predicted_step_time_us"])
        v = r["chunks"] if any(c == r["chunks"] for _, c in ratio) else 1
        at = ratio.get((r["microbatches"], v)) or ratio.get((4, v)) or [1.0]
        assert r["learned_predicted_step_time_us"] == pytest.approx(
            r["calibrated_predicted_step_time_us"] * statistics.median(at))
        assert r["error_learned"] == pytest.approx(
            r["measured_step_time_us"] / r["learned_predicted_step_time_us"] - 1.0)
        factors.append(r["measured_step_time_us"] / r["calibrated_predicted_step_time_us"])
    # the stop: whatever was not rerun is predicted, even at the largest factor learned,
    # outside the band of the fastest measured
    band = order_band(abs(ranked["calibration"]["error"]))
    fastest_run = min(r["measured_step_time_us"] for r in rows)
    for k in fitting - {key(r) for r in rows}:
        assert again[k] * max(factors) > fastest_run * (1.0 + band), k
    assert any(f"--verify auto reran {len(rows) - 1} candidate" in n for n in doc["notes"])
    fits = [r for r in rows if r["measured_peak_memory_bytes"] <= cap]
    if fits:
        fastest = min(fits, key=lambda r: r["measured_step_time_us"])
        assert (doc["proven"]["schedule"], doc["proven"]["microbatches"]) == \
            (fastest["schedule"], fastest["microbatches"])
        assert doc["proven"]["measured_peak_memory_bytes"] <= cap
    else:
        assert doc["proven"] is None


def test_verify_reruns_a_deepspeed_run_with_deepspeed(tmp_path):
    """A DeepSpeed run made by the harness is advised 1F1B at other M and rerun by DeepSpeed's
    PipelineEngine (gradient_accumulation_steps = M), not by torch's schedules."""
    pytest.importorskip("deepspeed")
    base = tmp_path / "base"
    res = invoke("profile", "--framework", "deepspeed", "-P", "2", "-M", "4", "--layers", "4",
                 "--hidden", "64", "--seq-len", "8", "--steps", "2", "--profile-memory",
                 "--out", base)
    assert res.exit_code == 0, res.output
    res = invoke("advise", base, "--microbatches", "2,4", "--verify", "1",
                 "--out", tmp_path / "reruns", "--format", "json")
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)["verified"]
    assert [(r["schedule"], r["microbatches"]) for r in rows] == [("1f1b", 4), ("1f1b", 2)]
    for row in rows:  # the candidate at M = 2 may move a layer (when the run's ends differ)
        assert Path(row["trace"]).parent == tmp_path / "reruns"
        assert Path(row["trace"]).name.startswith(f"1f1b_v1_m{row['microbatches']}")
        man = json.loads((Path(row["trace"]) / "manifest.json").read_text())
        assert man["stage_layers"] == row["stage_layers"]
        assert man["framework"]["name"] == "deepspeed"
        assert man["num_microbatches"] == row["microbatches"]
        assert row["measured_peak_memory_bytes"] > 0
