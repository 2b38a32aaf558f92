"""Analyze on the real harness traces in sample_traces/: every action found, schedule detected."""

from __future__ import annotations

import json
from collections import Counter

import polars as pl
import pytest

import pipeaudit
from pipeaudit.schedules import actions_from_names
from tests.support.paths import SAMPLES

RUNS = sorted(p for p in SAMPLES.iterdir() if (p / "manifest.json").exists())


def test_there_are_samples():
    names = {p.name for p in RUNS}
    for must in ("gpipe", "1f1b", "interleaved-1f1b", "zbv"):
        assert any(n.startswith(must + "_p2") for n in names), must
        assert any(n.startswith(must + "_p4") for n in names), must


@pytest.mark.parametrize("run_dir", RUNS, ids=[p.name for p in RUNS])
def test_every_action_found(run_dir):
    manifest = json.loads((run_dir / "manifest.json").read_text())
    run = pipeaudit.load(run_dir)
    result = run.audit()
    # P is the pipeline's stage positions: one process holding every stage (single process)
    # or several replicas of the pipeline (dp) leave it the layout's pp
    P = manifest.get("layout", {}).get("pp", manifest["num_ranks"])
    M, S = manifest["num_microbatches"], manifest["num_stages"]
    single = manifest.get("single_process", False)
    assert result.pipeline_found
    assert (result.num_ranks, result.num_stages, result.num_microbatches) == (P, S, M)
    assert result.num_steps == manifest["steps"]
    assert result.schedule == manifest["schedule"]
    # the order alone identifies the schedule the harness ran
    assert manifest["schedule"] in result.detected_schedules
    # torch's ScheduleGPipe writes "Forward i" / "Backward i" itself: only 1F1B is bare
    assert result.actions_inferred == (not manifest["annotated"] and manifest["schedule"] != "gpipe")
    if not single:  # one process: its device ranks are the report's, not the manifest's
        assert run.timeline.placement == {s: r for s, r in enumerate(manifest["stage_to_rank"])}
    assert len(result.pipelines) == manifest.get("layout", {}).get("dp", 1)
    acts = run.actions()
    for (rank, stage, step), grp in acts.group_by(["rank", "stage", "step"]):
        c = Counter(zip(grp["kind"], grp["microbatch"]))
        for m in range(M):
            assert c[("F", m)] == 1, (stage, step, m)
            assert c[("B", m)] + c[("I", m)] == 1, (stage, step, m)
            assert c[("W", m)] == c[("I", m)], (stage, step, m)
        assert set(grp["microbatch"]) == set(range(M))
    assert not [f for f in result.findings if f.code in ("MISSING_ACTIONS", "DUPLICATED_ACTIONS",
                                                          "SCHEDULE_ORDER_VIOLATION")]
    # the observed order of step 0 is the order the harness recorded it ran
    if "rank_actions" in manifest and not single:
        orders = run.timeline.orders(0)
        for r, names in manifest["rank_actions"].items():
            want = [str(a) for a in actions_from_names(names)]
            assert [str(a) for a in orders[int(r)]] == want, r


@pytest.mark.parametrize("run_dir", RUNS, ids=[p.name for p in RUNS])
def test_bubble_is_a_fraction_and_compute_within_spans(run_dir):
    run = pipeaudit.load(run_dir)
    result = run.audit()
    for r in result.ranks:
        assert 0.0 <= r.bubble <= 1.0
        assert 0.0 <= r.idle_fraction <= 1.0
        assert r.compute_us <= r.window_us
    acts = run.actions()
    assert (acts["compute_ns"] <= acts["end"] - acts["start"]).all()
    # torch fact: on stage 0 the input-gradient pass (I) has nothing to do (the model input needs
    # no gradient) and W runs the whole backward; every other action computes
    first_i = (pl.col("stage") == 0) & (pl.col("kind") == "I")
    assert (acts.filter(~first_i)["compute_ns"] > 0).all()
    assert (acts.filter(first_i)["compute_ns"] == 0).all()
    b = result.bubble
    assert b.theory is not None and b.theory_formula
    assert b.replay_ideal is not None and b.replay_ideal <= b.measured + 1e-9


def test_imbalance_sample_names_the_heavy_stage():
    run_dir = next(p for p in RUNS if "imb" in p.name)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    heavy = {int(s) for s in manifest["imbalance"]}
    result = pipeaudit.load(run_dir).audit()
    flagged = {f.stage for f in result.findings if f.code == "STAGE_IMBALANCE"}
    assert flagged == heavy


def test_unannotated_matches_annotated_counts():
    bare = pipeaudit.load(SAMPLES / "1f1b_p4_m8_noannot")
    ann = pipeaudit.load(SAMPLES / "1f1b_p4_m8")
    assert bare.audit().actions_inferred and bare.audit().action_source == "inferred"
    count = lambda run: run.actions().group_by(["stage", "kind"]).len().sort(["stage", "kind"])  # noqa: E731
    assert count(bare).equals(count(ann))


def test_memory_sample_has_peaks():
    run_dir = next(p for p in RUNS if "memory" in p.name)
    result = pipeaudit.load(run_dir).audit()
    assert all(r.peak_allocated_bytes and r.peak_allocated_bytes > 0 for r in result.ranks)


def test_frames_for_notebooks():
    run = pipeaudit.load(SAMPLES / "1f1b_p4_m8")
    assert run.stages().height == 4 and run.ranks().height == 4
    assert set(run.findings().columns) >= {"code", "severity", "rank", "stage", "message"}
    assert run.steps().height == 2
    pdf = run.actions().to_pandas()
    assert len(pdf) == 4 * 2 * 16
    assert isinstance(run.actions(), pl.DataFrame)
