"""``--single-process``: one process runs every stage with hand-written pipeline loops.

On this CPU-only machine all stages are on the CPU and run one after another; the CUDA path
(stage s on ``cuda:s``) is checked only where at least two GPUs are present. The hand-written
loops are checked for what they compute (the gradients of the unsplit model) as well as for
what they write into the trace.
"""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from pipeaudit.harness import ModelConfig, ProfileConfig  # noqa: E402
from tests.support.child import repo_env
from tests.support.paths import REPO
from tests.support.cli import invoke
from tests.support.kineto import inside, load, spans as xspans

MATMUL = ("aten::addmm", "aten::mm")





# ------------------------------------------------- what the loops compute (in-process)
@pytest.mark.parametrize("schedule", ["naive", "gpipe", "1f1b"])
def test_hand_written_pipeline_computes_the_unsplit_models_gradients(tmp_path, schedule):
    from pipeaudit.harness.model import loss_fn, make_batch
    from pipeaudit.harness.single import HandWrittenPipeline

    p, m = 3, 4
    cfg = ProfileConfig(out=str(tmp_path), schedule=schedule, stages=p, microbatches=m,
                        model=ModelConfig(layers=5, hidden=16, seq_len=4),
                        imbalance={1: 2}, single_process=True).validate()
    pipe = HandWrittenPipeline(cfg, [torch.device("cpu")] * p)
    x, y = make_batch(cfg, torch.device("cpu"))
    pipe.step(x, y)
    got = [prm.grad.clone() for mod in pipe.modules for prm in mod.parameters()]
    for mod in pipe.modules:
        mod.zero_grad(set_to_none=True)
    h = x
    for mod in pipe.modules:
        h = mod(h)
    loss_fn(h, y).backward()  # equal microbatches: the mean of their MSEs is the batch's MSE
    want = [prm.grad for mod in pipe.modules for prm in mod.parameters()]
    assert len(got) == len(want) > 0
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-6)


# ----------------------------------------------------------- real runs (CLI)
def _profile(tmp_path: Path, *args: str) -> tuple[Path, dict]:
    out = tmp_path / "single"
    res = invoke("profile", "--single-process", *args, "--hidden", "64",
                 "--seq-len", "8", "--steps", "2", "--warmup-steps", "1",
                 "--out", str(out))
    assert res.exit_code == 0, res.output
    return out, json.loads((out / "manifest.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_single_process_cpu_trace(tmp_path, schedule):
    p, m = 3, 4
    out, man = _profile(tmp_path, "--schedule", schedule, "--stages", str(p),
                        "--microbatches", str(m), "--layers", str(p))
    assert sorted(x.name for x in out.iterdir()) == ["manifest.json", "rank0.json.gz"]
    assert man["single_process"] is True and man["world_size"] == 1 and man["num_ranks"] == 1
    assert man["num_stages"] == p and man["stage_to_rank"] == [0] * p
    assert man["stage_devices"] == ["cpu"] * p and man["stages_concurrent"] is False
    assert man["backend"] == "none" and man["annotation_source"] == "harness"
    doc = load(out / "rank0.json.gz")
    assert "distributedInfo" not in doc or not doc["distributedInfo"].get("pg_config")
    steps = xspans(doc, "ProfilerStep#")
    assert [s["name"] for s in steps] == ["ProfilerStep#0", "ProfilerStep#1"]
    pp = xspans(doc, "PP:")
    mm = [e for e in xspans(doc, "aten::") if e["name"] in MATMUL]
    for st in steps:
        acts = [e for e in pp if inside(e, st)]
        # every stage's F and B of every microbatch once, in the plan's issue order
        assert [e["name"][3:] for e in acts] == man["rank_actions"]["0"]
        assert collections.Counter(e["name"][3:] for e in acts) == collections.Counter(
            f"{s}{k}{mb}" for s in range(p) for k in "FB" for mb in range(m))
        # one CPU: the stages run one after another, never overlapping
        for a, b in zip(acts, acts[1:]):
            assert a["ts"] + a["dur"] <= b["ts"] + 1e-3
        # all of the step's model compute is inside the PP: spans
        in_step = [e for e in mm if inside(e, st)]
        assert in_step and all(any(inside(e, a) for a in acts) for e in in_step)


@pytest.mark.slow
def test_single_process_unannotated_unmarked(tmp_path):
    out, man = _profile(tmp_path, "--schedule", "naive", "--stages", "2", "--microbatches", "2",
                        "--layers", "2", "--no-annotate", "--no-step-marks")
    assert man["step_marks"] is False and man["annotated"] is False
    c = collections.Counter(e["name"] for e in xspans(load(out / "rank0.json.gz")))
    assert not [n for n in c if n.startswith(("PP:", "ProfilerStep#"))]
    assert c["Optimizer.step#SGD.step"] == 2


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_single_process_two_gpus(tmp_path):  # pragma: no cover - no GPU on the CI machine
    out, man = _profile(tmp_path, "--schedule", "gpipe", "--stages", "2", "--microbatches", "4",
                        "--layers", "2")
    assert man["stage_devices"] == ["cuda:0", "cuda:1"] and man["stages_concurrent"] is True
    ev = load(out / "rank0.json.gz")["traceEvents"]
    kernel_devices = {e.get("args", {}).get("device") for e in ev if e.get("cat") == "kernel"}
    assert {0, 1} <= kernel_devices
    assert any(e.get("cat") == "gpu_memcpy" for e in ev)  # activations cross devices


@pytest.mark.slow
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_single_process_every_stage_on_one_gpu(tmp_path):  # pragma: no cover - no GPU on CI
    """--device cuda with fewer GPUs than stages: stage s on cuda:(s mod GPUs); audited as
    stages taking turns on the GPU when they all share one."""
    import pipeaudit

    n = torch.cuda.device_count()
    out, man = _profile(tmp_path, "--schedule", "1f1b", "--stages", "3", "--microbatches", "3",
                        "--layers", "3", "--device", "cuda")
    assert man["stage_devices"] == [f"cuda:{s % n}" for s in range(3)]
    assert man["stages_concurrent"] is (n >= 3)
    ev = load(out / "rank0.json.gz")["traceEvents"]
    assert any(e.get("cat") == "kernel" for e in ev)
    result = pipeaudit.load(out).audit()
    assert result.num_stages == 3 and result.schedule == "1f1b"
    if n == 1:
        assert result.bubble.theory == pytest.approx(2 / 3)
        assert any("taking turns on one GPU" in note for note in result.notes)


@pytest.mark.slow
def test_single_process_under_torchrun(tmp_path):
    import subprocess
    import sys

    from pipeaudit.harness.launcher import free_port

    repo = REPO
    env = repo_env(TMPDIR=str(tmp_path))  # torchrun leaves its log folder (torchelastic_*) there
    out = tmp_path / "tr"
    res = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "1",
         "--master-port", str(free_port()), "-m", "pipeaudit.harness", "--single-process",
         "--schedule", "1f1b", "--stages", "2", "--microbatches", "2", "--layers", "2",
         "--hidden", "32", "--seq-len", "4", "--out", str(out)],
        cwd=repo, env=env, capture_output=True, text=True, timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    man = json.loads((out / "manifest.json").read_text())
    assert man["launcher"] == "torchrun" and man["single_process"] is True
    assert man["rank_actions"]["0"] == ["0F0", "0F1", "1F0", "1B0", "0B0", "1F1", "1B1", "0B1"]
    assert sorted(x.name for x in out.iterdir()) == ["manifest.json", "rank0.json.gz"]
