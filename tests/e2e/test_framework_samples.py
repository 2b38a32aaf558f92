"""DeepSpeed's PipelineEngine and Megatron-core's schedules, read without annotations: real runs
in ``sample_traces/deepspeed_*`` and ``sample_traces/megatron_*``.

Each sample was made by ``pipeaudit profile --framework deepspeed|megatron`` with the harness's
exact ``PP:`` spans around the framework's forward and backward actions. Neither framework
writes any: stripping them (and the manifest) leaves the traces their users have. Read from
those traces alone, the run must come out as read with its annotations: the schedule (DeepSpeed's
TrainSchedule is 1F1B's order; Megatron's interleaved virtual stages told apart), M, steps,
pipelines and stages, theory and replay ideal, and every rank's bubble within 0.005.
"""

from __future__ import annotations

import json

import pytest

import pipeaudit
from tests.support.paths import SAMPLES
from tests.support.strip import relabel_ranks, strip_run

RUNS = sorted(p for p in [*SAMPLES.glob("deepspeed_*"), *SAMPLES.glob("megatron_*")]
              if (p / "manifest.json").exists())
WRONG = {"MISSING_ACTIONS", "DUPLICATED_ACTIONS", "SCHEDULE_ORDER_VIOLATION"}


def test_the_samples_cover_the_issue():
    names = {p.name for p in RUNS}
    assert {"deepspeed_p2_m8", "deepspeed_p4_m8", "deepspeed_p4_m4_imb_s2x3_nosteps",
            "deepspeed_p4_m2_imb_s1x3", "deepspeed_p2_dp2_m8", "megatron_1f1b_p4_m8",
            "megatron_1f1b_p4_m4_imb_s1x3", "megatron_interleaved-1f1b_p4_m8_v2",
            "megatron_interleaved-1f1b_p4_m4_v2_imb_s2x3"} <= names


def _bubbles(result) -> dict[int, float]:
    return {r.rank: r.bubble for r in result.ranks}


@pytest.mark.parametrize("run_dir", RUNS, ids=[p.name for p in RUNS])
def test_unannotated_reads_as_annotated(run_dir, tmp_path):
    manifest = json.loads((run_dir / "manifest.json").read_text())
    framework = manifest["framework"]["name"]
    assert framework in ("deepspeed", "megatron-core")
    annotated = pipeaudit.load(run_dir).audit()
    bare = pipeaudit.load(strip_run(run_dir, tmp_path / "bare")).audit()
    assert bare.actions_inferred and not annotated.actions_inferred
    P, D, M = manifest["layout"]["pp"], manifest["layout"]["dp"], manifest["num_microbatches"]
    v = manifest["chunks"]
    assert bare.schedule == manifest["schedule"] and bare.schedule_source == "detected"
    assert annotated.schedule == manifest["schedule"]
    assert manifest["schedule"] in annotated.detected_schedules  # the framework ran that order
    assert (bare.num_ranks, bare.num_stages, bare.num_microbatches) == (P, P * v, M)
    assert bare.num_steps == manifest["steps"] == annotated.num_steps
    assert len(bare.pipelines) == D
    assert [p.ranks for p in bare.pipelines] == manifest["pipelines"]
    # DeepSpeed's groups carry no names: who sends to whom; Megatron names its pipeline groups
    assert bare.layout["source"] == ("point-to-point peers" if framework == "deepspeed"
                                     else "pg_config")
    assert bare.bubble.theory == pytest.approx((P - 1) / (v * M + P - 1))
    assert bare.bubble.replay_ideal is not None
    assert not WRONG & {f.code for f in bare.findings}
    assert not WRONG & {f.code for f in annotated.findings}
    ours, truth = _bubbles(bare), _bubbles(annotated)
    assert ours.keys() == truth.keys()
    for rank, b in truth.items():
        assert ours[rank] == pytest.approx(b, abs=0.005), rank
    assert bare.bubble.measured == pytest.approx(annotated.bubble.measured, abs=0.005)


@pytest.mark.parametrize("name,perm", [
    ("deepspeed_p4_m8", {0: 3, 1: 0, 2: 2, 3: 1}),
    ("deepspeed_p2_dp2_m8", {0: 1, 1: 3, 2: 0, 3: 2}),
    ("megatron_interleaved-1f1b_p4_m8_v2", {0: 2, 1: 3, 2: 1, 3: 0}),
])
def test_any_rank_order(name, perm, tmp_path):
    """The pipelines come from who sends to whom, not from rank numbers: the same run with its
    ranks renamed reads the same, each pipeline in the renamed ranks' stage order."""
    run_dir = SAMPLES / name
    manifest = json.loads((run_dir / "manifest.json").read_text())
    bare = strip_run(run_dir, tmp_path / "bare")
    result = pipeaudit.load(relabel_ranks(bare, tmp_path / "renamed", perm)).audit()
    truth = pipeaudit.load(run_dir).audit()
    assert [p.ranks for p in result.pipelines] == sorted(
        ([perm[r] for r in pipe] for pipe in manifest["pipelines"]), key=lambda p: p[0])
    assert result.schedule == manifest["schedule"]
    assert result.num_microbatches == manifest["num_microbatches"]
    ours = _bubbles(result)
    for rank, b in _bubbles(truth).items():
        assert ours[perm[rank]] == pytest.approx(b, abs=0.005)
