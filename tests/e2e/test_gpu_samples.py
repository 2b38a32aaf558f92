"""The real GPU traces in sample_traces/single_cuda_* (one H100; every stage on cuda:0).

Checked against the trace itself, read here with gzip + json: the actions' compute is the
kernels', the stages take turns on the one GPU (theory and replay (P-1)/P of stages back to
back), and a host slower than the tiny model's kernels shows as HOST_OVERHEAD.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
import pytest

import pipeaudit

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
GPU_RUNS = sorted(SAMPLES.glob("single_cuda_*"))
DEVICE_WORK = ("kernel", "gpu_memcpy", "gpu_memset")


def _events(run: Path) -> list[dict]:
    return json.loads(gzip.open(run / "rank0.json.gz").read())["traceEvents"]


def test_there_are_gpu_samples():
    assert len(GPU_RUNS) >= 4


@pytest.mark.parametrize("run_dir", GPU_RUNS, ids=[p.name for p in GPU_RUNS])
def test_compute_is_the_kernels_and_stages_share_the_gpu(run_dir):
    manifest = json.loads((run_dir / "manifest.json").read_text())
    P, M = manifest["num_stages"], manifest["num_microbatches"]
    assert set(manifest["stage_devices"]) == {"cuda:0"} and not manifest["stages_concurrent"]
    ev = _events(run_dir)
    gpu_us = sum(e["dur"] for e in ev if e.get("cat") in DEVICE_WORK)
    run = pipeaudit.load(run_dir)
    result = run.audit()
    assert (result.num_ranks, result.num_stages, result.num_microbatches) == (P, P, M)
    assert result.schedule == manifest["schedule"] and result.num_steps == manifest["steps"]
    acts = run.actions()
    assert acts.height == P * M * 2 * manifest["steps"]
    # every action's compute is GPU work of the trace; all but the optimizer's is an action's
    compute_us = acts["compute_ns"].sum() / 1000
    assert 0.6 * gpu_us < compute_us <= gpu_us
    assert any("taking turns on one GPU" in n for n in result.notes)
    assert result.bubble.theory == pytest.approx((P - 1) / P)
    per_stage = acts.group_by("stage").agg(pl.col("compute_ns").sum()).sort("stage")["compute_ns"]
    share = {s: c / per_stage.sum() for s, c in enumerate(per_stage.to_list())}
    for r in result.ranks:  # the replay: the stages' compute back to back on the GPU
        assert r.replay_bubble == pytest.approx(1 - share[r.rank], rel=1e-6)
    codes = {f.code for f in result.findings}
    assert "EXPOSED_COMMUNICATION" not in codes  # one process communicates nothing
    assert result.bubble.measured >= result.bubble.replay_ideal - 1e-9


def test_gpu_bound_run_matches_stages_back_to_back():
    """hidden 2048 x 1024 tokens: kernels of milliseconds, the host far ahead of them."""
    run = pipeaudit.load(SAMPLES / "single_cuda_gpipe_p2_m4_big")
    result = run.audit()
    assert result.bubble.measured == pytest.approx(0.5, abs=0.01)
    assert result.bubble.overhead_part < 0.01
    assert not [f for f in result.findings if f.severity in ("warning", "error")]
    means = run.actions().group_by("kind").agg(pl.col("compute_ns").mean())
    t = dict(zip(means["kind"], means["compute_ns"]))
    assert 1.6 < t["B"] / t["F"] < 2.4  # the backward does about twice the forward's matmuls


@pytest.mark.parametrize("name", ["single_cuda_1f1b_p4_m8", "single_cuda_gpipe_p2_m4"])
def test_launch_bound_run_is_host_overhead(name):
    """The tiny model: kernels of microseconds, launched slower than they run."""
    result = pipeaudit.load(SAMPLES / name).audit()
    assert result.bubble.overhead_part > 0.1
    assert "HOST_OVERHEAD" in {f.code for f in result.findings}


def test_gpu_memory_peak_is_the_devices():
    run_dir = SAMPLES / "single_cuda_1f1b_p2_m4_memory"
    peak = max(e["args"]["Total Allocated"] for e in _events(run_dir)
               if e.get("name") == "[memory]" and e["args"].get("Device Type") == 1)
    result = pipeaudit.load(run_dir).audit()
    # the stages share cuda:0: each reports the device's peak, the two stages' together
    assert {r.peak_allocated_bytes for r in result.ranks} == {peak}
