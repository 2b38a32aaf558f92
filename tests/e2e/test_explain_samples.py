"""explain and whatif on the real harness traces in sample_traces/."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pytest

import pipeaudit
from pipeaudit.explain import Changes, explain, whatif
from pipeaudit.explain.critical import COMPUTE
from pipeaudit.explain.explain import prepared_graphs
from pipeaudit.explain.model import measured_model, run_model
from tests.support.paths import SAMPLES

RUNS = sorted(p for p in SAMPLES.iterdir() if (p / "manifest.json").exists())


#: the single-GPU samples of the tiny model: kernels of microseconds launched slower than they
#: run, so the host's gaps, not compute, make up much of each step's chain
LAUNCH_BOUND = {p for p in RUNS if p.name.startswith("single_cuda_") and not p.name.endswith("_big")}
#: their gaps vary from step to step more than the typical-value model's 10%
P2 = [p for p in RUNS if "_p2_" in p.name and p not in LAUNCH_BOUND]


@lru_cache(maxsize=None)
def loaded(run_dir: Path):
    """(run, audit) of a sample, loaded once for this module's tests; of a job of several
    pipeline replicas, its slowest replica's (what ``explain`` shows by default)."""
    run = pipeaudit.load(run_dir)
    res = run.audit()
    if len(res.pipelines) > 1:
        run = run.pipeline(res.job["slowest_pipeline"])
        res = run.audit()
    return run, res


@pytest.mark.parametrize("run_dir", RUNS, ids=[p.name for p in RUNS])
def test_path_tiles_the_step_and_replay_reproduces_it(run_dir):
    run, res = loaded(run_dir)
    ex = explain(run.timeline)
    assert [p.step for p in ex.steps] == [s.step for s in res.steps]
    for p, s in zip(ex.steps, res.steps):
        # the explained window is the audit's step window
        assert p.step_time_us == pytest.approx(s.step_time_us, abs=1e-3)
        assert p.items[0].start_us == 0 and p.items[-1].end_us == pytest.approx(p.step_time_us)
        for a, b in zip(p.items, p.items[1:]):
            assert b.start_us == pytest.approx(a.end_us, abs=1e-3)
        assert p.compute_share + p.comm_share + p.other_share == pytest.approx(1.0)
        if run_dir in LAUNCH_BOUND:
            assert p.compute_share < 0.8 and p.other_share > 0.05  # the host shows on the chain
        elif run_dir.name.startswith("cuda_shared_"):
            # four ranks on one GPU, their P2P over gloo through host memory: the chain is
            # mostly that transfer and the host (compute 0.16-0.38 of it)
            assert p.compute_share < p.comm_share + p.other_share
        elif run_dir.name.startswith("megatron_"):
            # Megatron's P2P bookkeeping between actions (isend/irecv one by one on gloo,
            # four ranks on two cores) shows on the chain: 0.41 on the interleaved sample
            assert p.compute_share > 0.3
        else:
            assert p.compute_share > 0.5  # the chain is mostly compute on these runs
        assert all(x.slack_us >= 0 for x in p.slack)
        assert len(p.slack) == sum(len(o) for o in run.timeline.orders(p.step).values())
        crit = {(i.rank, i.label) for i in p.items if i.what == COMPUTE}
        for x in p.slack:
            if (x.rank, f"{x.stage}{x.kind}{x.microbatch}") in crit:
                assert x.slack_us == pytest.approx(0.0, abs=1e-3)
    # unchanged, the replay of each measured step is the measurement
    graphs, _, _ = prepared_graphs(run.timeline)
    for g in graphs:
        assert run_model(measured_model(g)).step_time == pytest.approx(g.step_time, abs=1.0)
    assert ex.top_causes and all(c.gain_us_if_10pct_faster >= -1e-6 for c in ex.top_causes)
    gains = [c.gain_us_if_10pct_faster for c in ex.top_causes]
    assert gains == sorted(gains, reverse=True)


def test_heavy_stage_is_the_top_cause():
    """sample_traces/1f1b_p4_m8_imb_s1x3: the harness made stage 1 three times heavier."""
    run, _ = loaded(SAMPLES / "1f1b_p4_m8_imb_s1x3")
    ex = explain(run.timeline)
    assert ex.top_causes[0].stage == 1 and ex.top_causes[1].stage == 1
    for p in ex.steps:
        on_1 = sum(i.duration_us for i in p.actions() if i.stage == 1)
        assert on_1 > 0.6 * p.step_time_us
    pred = whatif(run.timeline, Changes(scale=((1, None, 1 / 3),)))
    assert pred.predicted_step_time_us < 0.8 * pred.measured_step_time_us


@pytest.mark.parametrize("run_dir", P2, ids=[p.name for p in P2])
def test_typical_model_is_calibrated(run_dir):
    """The typical-value model replayed on the unchanged order lands near the measured step
    (two ranks on two cores; the four-rank samples share the cores and are noisier)."""
    run, res = loaded(run_dir)
    pred = whatif(run.timeline, Changes(microbatches=res.num_microbatches), res)
    assert pred.model == "typical values"
    assert abs(pred.calibration["error"]) < 0.10, pred.calibration
    # the catalogue order at the same M is the order torch ran: same replay
    assert pred.predicted_step_time_us == pytest.approx(pred.calibration["unchanged_prediction_us"])


def test_findings_point_to_explain():
    _, res = loaded(SAMPLES / "1f1b_p4_m8_imb_s1x3")
    f = next(f for f in res.findings if f.code == "BUBBLE_ABOVE_THEORY")
    assert "pipeaudit explain" in f.message
    imb = next(f for f in res.findings if f.code == "STAGE_IMBALANCE")
    assert f"pipeaudit whatif --scale {imb.stage}=" in imb.message


@pytest.mark.parametrize("target,warned", [("interleaved-1f1b", True), ("zbv", True),
                                           ("gpipe", False)])
def test_a_change_of_torch_runtime_is_an_assumption(target, warned):
    """1F1B and GPipe run on PipelineScheduleSingle's loop, the multi-stage schedules on the
    action runtime; their per-action host overhead differs, which the run cannot show."""
    run, res = loaded(SAMPLES / "1f1b_p2_m4")
    pred = whatif(run.timeline, Changes(schedule=target), res)
    notes = [a for a in pred.assumptions if "host overhead per action differs" in a]
    assert bool(notes) == warned, pred.assumptions
    if warned:
        assert "PipelineScheduleSingle" in notes[0] and "_PipelineScheduleRuntime" in notes[0]
