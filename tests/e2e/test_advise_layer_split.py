"""Where to cut the model, on real harness runs: ``profile --stage-layers`` and ``--heavy-layer``
cut the model as asked in torch, DeepSpeed and Megatron-core, and ``advise`` proposes a split
from an even run, proves it with ``--verify`` and predicts its memory per rank. (Its step-time
accuracy is measured by ``benchmarks/split_advice.py``, not asserted on a shared machine.)"""

from __future__ import annotations

import json

import pytest

import pipeaudit
from pipeaudit.advise import advise
from pipeaudit.advise.memory import rank_memory
from tests.support.cli import invoke

pytest.importorskip("torch")
pytestmark = pytest.mark.slow

SMALL = ("-P", "3", "-M", "3", "--layers", "6", "--hidden", "256", "--seq-len", "8",
         "--batch-size", "24", "--steps", "2", "--profile-memory")


def _profile(out, *extra):
    res = invoke("profile", *SMALL, *extra, "--out", out)
    assert res.exit_code == 0, res.output
    return json.loads((out / "manifest.json").read_text())


def test_advise_proposes_a_split_and_verify_reruns_it(tmp_path):
    """The last layer is eight blocks: the even split 2,2,2 loads the last stage about four
    times the others (a descheduled op on another stage of this tiny model cannot outweigh
    it); advise proposes a split whose last stage holds fewer layers, prints it in every
    framework's terms, and --verify reruns exactly that split, its memory per rank as
    predicted."""
    base = tmp_path / "even"
    manifest = _profile(base, "--heavy-layer", "5:8")
    assert manifest["stage_layers"] == [2, 2, 2] and manifest["heavy_layers"] == {"5": 8}
    res = invoke("advise", base, "--schedules", "1f1b", "--microbatches", "3", "--verify", "1",
                 "--out", tmp_path / "reruns", "--format", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["measured_stage_layers"] == [2, 2, 2]
    assert all(c["stage_layers"] is not None for c in doc["candidates"])
    split = next(c for c in doc["candidates"] if not c["is_measured_configuration"])
    assert split["stage_layers"][-1] < 2 and sum(split["stage_layers"]) == 6
    rows = doc["verified"]
    assert [r["stage_layers"] for r in rows] == [[2, 2, 2], split["stage_layers"]]
    rerun = json.loads((tmp_path / "reruns" / ("1f1b_v1_m3_s" + "-".join(
        map(str, split["stage_layers"]))) / "manifest.json").read_text())
    assert rerun["stage_layers"] == split["stage_layers"] and rerun["heavy_layers"] == {"5": 8}
    assert abs(rows[1]["memory_error"]) <= 0.10, rows[1]
    text = invoke("advise", base, "--schedules", "1f1b", "--microbatches", "3")
    assert text.exit_code == 0
    assert "SplitPoint.BEGINNING" in text.stdout and "module_fqns_per_model_part" in text.stdout
    assert "pipeline_model_parallel_layout" in text.stdout or \
        "num_layers_in_first_pipeline_stage" in text.stdout


@pytest.mark.parametrize("framework", ["deepspeed", "megatron"])
def test_frameworks_cut_the_model_as_asked(framework, tmp_path):
    """An uneven split 2,3,1 with a last layer of four blocks: each stage's gradients (its
    weights) are its blocks' (2, 3 and 4 blocks, give or take a received input's gradient), so
    the framework built the stages asked for. Megatron-core takes the split as its own
    pipeline_model_parallel_layout; advise from an even run predicts the uneven run's peak
    within 10 % (DeepSpeed's CPU base sometimes keeps a rank's previous gradients:
    docs/advise.md)."""
    pytest.importorskip("deepspeed" if framework == "deepspeed" else "megatron.core")
    cut = tmp_path / "cut"
    manifest = _profile(cut, "--framework", framework, "--stage-layers", "2,3,1",
                        "--heavy-layer", "5:4")
    assert manifest["stage_layers"] == [2, 3, 1]
    mem = rank_memory(pipeaudit.load(cut).timeline)
    grads = {s: t.grads for m in mem.values() for s, t in m.stages.items()}
    # 3/2 and 4/2 the first stage's (the even split's 2,2,5 blocks would give 1 and 2.5)
    assert 1.3 < grads[1] / grads[0] < 1.8 and 1.8 < grads[2] / grads[0] < 2.3, grads
    if framework == "megatron":
        even = tmp_path / "even"
        _profile(even, "--framework", framework, "--heavy-layer", "5:4")
        got = advise(pipeaudit.load(even), schedules=["1f1b"], microbatches=[3],
                     splits=[(2, 3, 1)])
        cand = next(c for c in got.candidates if c.stage_layers == (2, 3, 1))
        peak = max(r.peak_allocated_bytes for r in pipeaudit.load(cut).audit().ranks)
        assert cand.predicted_peak_memory_bytes == pytest.approx(peak, rel=0.10)
