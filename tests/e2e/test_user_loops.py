"""A student's single-process pipeline (``examples/student_loops.py``): the user's own span names,
found without ``--action-pattern``; naive, GPipe and the delayed-backward loop named; no
straggler between stages that take turns on one device.

``sample_traces/user_loop_cuda_*_p4_m8`` are real runs of that script on one H100 (4 stages,
8 microbatches, stage 2 three times heavier); the CPU runs are made here.
"""

from __future__ import annotations

import pytest

import pipeaudit
from tests.support.paths import REPO, SAMPLES

LOOPS = {"naive": "naive", "gpipe": "gpipe", "1f1b": "delayed-backward"}


def _check(result, schedule: str, P: int, M: int) -> None:
    assert result.pipeline_found and not result.actions_inferred
    assert result.schedule == schedule and result.schedule_source == "detected"
    assert (result.num_ranks, result.num_microbatches, result.num_steps) == (P, M, 2)
    codes = {f.code for f in result.findings}
    assert "STRAGGLER_RANK" not in codes and "MISSING_ACTIONS" not in codes
    assert any("spans named like s{stage}_{fwd|bwd}_mb{mb} (detected" in n for n in result.notes)


@pytest.mark.parametrize("loop", LOOPS)
def test_gpu_samples(loop):
    run_dir = SAMPLES / f"user_loop_cuda_{loop}_p4_m8"
    result = pipeaudit.load(run_dir).audit()
    _check(result, LOOPS[loop], 4, 8)
    assert result.device_type == "cuda"
    slow = [f for f in result.findings if f.code == "STAGE_IMBALANCE"]
    assert [f.stage for f in slow] == [2]  # the 3x heavier stage, on the GPU's kernels


@pytest.mark.parametrize("loop", LOOPS)
def test_cpu_runs(loop, tmp_path):
    pytest.importorskip("torch")
    import runpy
    import sys

    out = tmp_path / "trace.json.gz"
    argv = sys.argv
    sys.argv = ["student_loops.py", "--loop", loop, "--out", str(out), "--stages", "3",
                "--microbatches", "5", "--hidden", "128", "--rows", "32"]
    try:
        runpy.run_path(str(REPO / "examples" / "student_loops.py"), run_name="__main__")
    finally:
        sys.argv = argv
    result = pipeaudit.load(out).audit()
    assert result.device_type == "cpu"
    _check(result, LOOPS[loop], 3, 5)


def test_shared_h100_user_loop():
    """The H100 run made elsewhere (``shared/traces/h100_one_gpu/single_gpipe_p4_m8``): its
    ``run.json`` is the truth."""
    import json

    from tests.support.paths import SHARED_TRACES

    run_dir = SHARED_TRACES / "h100_one_gpu" / "single_gpipe_p4_m8"
    if not run_dir.exists():
        pytest.skip("shared GPU traces not present")
    truth = json.loads((run_dir / "run.json").read_text())
    result = pipeaudit.load(run_dir).audit()
    assert result.schedule == truth["loop"] and result.schedule_source == "detected"
    assert (result.num_ranks, result.num_microbatches, result.num_steps) == (
        truth["P"], truth["M"], truth["steps"])
    assert "STRAGGLER_RANK" not in {f.code for f in result.findings}
