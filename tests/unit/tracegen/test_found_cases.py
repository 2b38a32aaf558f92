"""Generated cases that the long search (benchmarks/generated_reading.py) found read wrong or
left uncertain, each held to its truth now that the reader reads it (docs/robustness.md)."""

from __future__ import annotations

import pytest

from tests.support.tracegen import Case
from tests.support.tracegen.check import run_case

FOUND = {
    # looped BFS over one chunk per rank, with its spans: read as no schedule (it was built
    # with the schedule's default two chunks when detected)
    "looped-bfs at one chunk": Case(schedule="looped-bfs", pp=3, v=1, m=3, steps=1,
                                    annotated=True, p2p="gloo", profiler_steps=True),
    # one rank's file, stages of two alike layers, M stated: M read as twice the stated one
    "one rank, alike layers, M stated": Case(
        schedule="1f1b", pp=4, v=1, m=5, steps=3, dp=2, tp=2, named_groups=True, annotated=False,
        p2p="gloo", batched=True, profiler_steps=False, optimizer=True, batch_split=False,
        op_shape="repeated", layers=2, nested=True, loss=False, heavy_factor=4.0,
        heavy_by_layers=True, one_rank=10, state_steps=True, state_microbatches=True,
        latency_us=30.0, seed=290903507),
    # ZBV from its ops, P = 5, M = 17, a W and the next I back to back with nothing between:
    # the split backwards were not told apart
    "zbv from the ops, actions back to back": Case(
        schedule="zbv", pp=5, v=2, m=17, steps=1, named_groups=True, annotated=False, p2p="gloo",
        batched=True, profiler_steps=True, optimizer=False, batch_split=False, op_shape="dominant",
        nested=False, loss=False, heavy_factor=3.0, heavy_by_layers=True, deschedule="compute",
        state_steps=True, latency_us=200.0, seed=882552464),
    # ZBV on GPU (NCCL-like kernels) with its spans: the first stage's I launches no kernel,
    # and drawn at its host time (ahead of the device) it came before the forward it follows
    "zbv on GPU, kernel-less I": Case(
        schedule='zbv', pp=4, v=2, m=13, steps=2, named_groups=False, annotated=True, p2p='nccl',
        batched=True, optimizer=False, op_shape='dominant', nested=False, data_load=True,
        heavy_factor=2.0, heavy_by_layers=True, deschedule='prep', shuffle=True, state_steps=True,
        seed=2045534180),
}


@pytest.mark.parametrize("name", list(FOUND))
def test_a_case_the_search_found_reads_to_its_truth(name: str) -> None:
    out = run_case(FOUND[name])
    assert out.verdict == "pass", out.problems
