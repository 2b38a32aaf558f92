"""Audit of built traces whose bubble is known exactly (docs/metrics.md definitions)."""

from __future__ import annotations

import pytest

import pipeaudit
from tests.support.builders import build_run, gpipe_orders, one_f_one_b_orders

TOL = 0.005


def _check_bubble(run, built):
    result = run.audit()
    truth = built.true_bubble()
    for r in result.ranks:
        assert r.bubble == pytest.approx(truth[r.rank], abs=TOL), r.rank
    return result


@pytest.mark.parametrize("P,M", [(2, 4), (4, 8), (3, 5)])
def test_gpipe_uniform_matches_closed_form(tmp_path, P, M):
    built = build_run(tmp_path, gpipe_orders(P, M), steps=2)
    result = _check_bubble(pipeaudit.load(built.directory), built)
    assert result.bubble.measured == pytest.approx((P - 1) / (M + P - 1), abs=TOL)
    assert result.schedule == "gpipe" and result.schedule_source == "detected"
    assert result.bubble.theory == pytest.approx((P - 1) / (M + P - 1))
    assert result.num_steps == 2 and result.num_microbatches == M and result.num_ranks == P
    assert not result.actions_inferred
    assert not [f for f in result.findings if f.severity != "info"], result.findings


@pytest.mark.parametrize("P,M", [(2, 4), (4, 8), (4, 4)])
def test_1f1b_uniform_matches_closed_form(tmp_path, P, M):
    built = build_run(tmp_path, one_f_one_b_orders(P, M))
    result = _check_bubble(pipeaudit.load(built.directory), built)
    assert result.bubble.measured == pytest.approx((P - 1) / (M + P - 1), abs=TOL)
    assert result.schedule == "1f1b"
    assert result.bubble.replay_ideal == pytest.approx(result.bubble.measured, abs=TOL)
    peaks = {s.stage: s.peak_inflight for s in result.stages}
    assert peaks == {s: min(M, P - s) for s in range(P)}
    assert all(st.expected_peak_inflight == min(M, P - st.stage) for st in result.stages)


def test_imbalanced_stage_is_found_and_bubble_exact(tmp_path):
    P, M = 4, 8
    dur = lambda s, k, m: (3 if s == 2 else 1) * (1000 if k == "F" else 2000)  # noqa: E731
    built = build_run(tmp_path, one_f_one_b_orders(P, M), dur=dur)
    result = _check_bubble(pipeaudit.load(built.directory), built)
    imb = [f for f in result.findings if f.code == "STAGE_IMBALANCE"]
    assert [f.stage for f in imb] == [2]
    assert result.bubble.measured > result.bubble.theory + 0.1
    # the replay with measured durations explains the whole gap: no comm in this trace
    assert result.bubble.replay_ideal == pytest.approx(result.bubble.measured, abs=TOL)
    assert any(f.code == "BUBBLE_ABOVE_THEORY" for f in result.findings)


def test_latency_and_waits_inside_spans(tmp_path):
    P, M = 4, 8
    built = build_run(tmp_path, one_f_one_b_orders(P, M), latency=600)
    result = _check_bubble(pipeaudit.load(built.directory), built)
    b = result.bubble
    assert b.measured > b.replay_ideal + 0.02  # communication shows as overhead, not compute
    assert b.replay_ideal == pytest.approx(b.theory, abs=TOL)
    assert b.overhead_part == pytest.approx(b.measured - b.replay_ideal)
    # action spans are longer than their compute: the recv wait is not compute
    acts = pipeaudit.load(built.directory).actions()
    waited = acts.filter((acts["span_us"] - acts["compute_us"]) > 300)
    assert waited.height > 0


def test_uninferred_equals_annotated(tmp_path):
    P, M = 4, 8
    ann = build_run(tmp_path, one_f_one_b_orders(P, M), latency=200, name="ann")
    bare = build_run(tmp_path, one_f_one_b_orders(P, M), latency=200, annotate=False, name="bare")
    ra, rb = pipeaudit.load(ann.directory).audit(), pipeaudit.load(bare.directory).audit()
    assert rb.actions_inferred and not ra.actions_inferred
    assert [s.actions for s in rb.stages] == [s.actions for s in ra.stages]
    for x, y in zip(ra.ranks, rb.ranks):
        assert x.bubble == pytest.approx(y.bubble, abs=TOL)
    assert rb.schedule == "1f1b"


def test_straggler_rank(tmp_path):
    P, M = 4, 8
    built = build_run(tmp_path, gpipe_orders(P, M), host_delay=lambda r: 400 if r == 1 else 0)
    result = _check_bubble(pipeaudit.load(built.directory), built)
    assert [f.rank for f in result.findings if f.code == "STRAGGLER_RANK"] == [1]


def test_missing_microbatch_is_a_finding(tmp_path):
    P, M = 2, 4
    orders = gpipe_orders(P, M)
    orders[1] = [a for a in orders[1] if a != (1, "B", 2)]
    orders[0] = [a for a in orders[0] if a != (0, "B", 2)]
    built = build_run(tmp_path, orders)
    result = pipeaudit.load(built.directory).audit()
    missing = [f for f in result.findings if f.code == "MISSING_ACTIONS"]
    assert {f.stage for f in missing} == {0, 1}
    assert "1B2" in next(f.message for f in missing if f.stage == 1)


def test_declared_schedule_contradicted(tmp_path):
    built = build_run(tmp_path, gpipe_orders(4, 8))
    result = pipeaudit.load(built.directory, schedule="1f1b").audit()
    assert result.schedule_source == "declared"
    assert any(f.code == "SCHEDULE_ORDER_VIOLATION" for f in result.findings)


def test_one_misread_step_does_not_hide_the_schedule(tmp_path):
    """Step 0's order on rank 0 differs (two of its spans' names swapped: 0B0 where 0F1 ran);
    step 1 is 1F1B: the schedule is detected from step 1, and step 0 is flagged."""
    import json

    built = build_run(tmp_path, one_f_one_b_orders(4, 8), steps=2, latency=100)
    path = built.directory / "rank0.json"
    trace = json.loads(path.read_text())
    first = min(e["ts"] for e in trace["traceEvents"] if e.get("name", "").startswith("PP:"))
    step0 = [e for e in trace["traceEvents"] if e.get("name") in ("PP:0F1", "PP:0B0")
             and e["ts"] < first + 20_000]
    assert len(step0) == 2
    step0[0]["name"], step0[1]["name"] = step0[1]["name"], step0[0]["name"]
    path.write_text(json.dumps(trace))

    result = pipeaudit.load(built.directory).audit()
    assert (result.schedule, result.schedule_source) == ("1f1b", "detected")
    assert any("detected from step 1" in n for n in result.notes)
    assert any(f.code == "SCHEDULE_ORDER_VIOLATION" and f.rank == 0 for f in result.findings)


def test_memory_peak(tmp_path):
    built = build_run(tmp_path, gpipe_orders(2, 4), memory=True)
    result = pipeaudit.load(built.directory).audit()
    assert [r.peak_allocated_bytes for r in result.ranks] == [1_000_000 + 7000, 2_000_000 + 7000]


def test_gpu_trace_compute_is_kernels_attributed_by_launch(tmp_path):
    P, M = 4, 8
    built = build_run(tmp_path, one_f_one_b_orders(P, M), latency=300, gpu=True, steps=2)
    run = pipeaudit.load(built.directory)
    result = _check_bubble(run, built)
    assert result.device_type == "cuda" and result.schedule == "1f1b"
    acts = run.actions()
    # every action got exactly its kernel: compute equals the kernel time
    assert (acts["compute_ns"] > 0).all()
    assert result.bubble.measured > result.bubble.replay_ideal + 0.02  # NCCL latency is overhead
    for r in result.ranks:
        assert r.comm_us > 0 and 0.0 <= r.overlap <= 1.0
        assert r.idle_fraction < r.bubble  # a rank waiting in a recv kernel is busy, yet in bubble
