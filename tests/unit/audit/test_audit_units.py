"""The audit on timelines built in memory (``tests/support/timelines.py``): no trace, no decode.

Each known answer comes from the placement itself; the audit is the only thing under test.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.support.builders import gpipe_orders, one_f_one_b_orders
from pipeaudit.audit.run import audit
from pipeaudit.timeline.model import Timeline
from tests.support.timelines import timeline, truth_bubble

BASE = {"F": 1000, "B": 2000}


def _slow(stage, factor):
    return lambda s, k, m: int(BASE[k] * (factor if s == stage else 1))


@pytest.mark.parametrize("orders,name", [(one_f_one_b_orders(4, 8), "1f1b"),
                                         (gpipe_orders(3, 5), "gpipe"),
                                         (one_f_one_b_orders(4, 2), "1f1b")])
@pytest.mark.parametrize("slow", [None, 2])
def test_bubble_theory_and_replay_ideal(orders, name, slow):
    tl = timeline(orders, steps=2, dur=_slow(slow, 3.0) if slow is not None else None)
    res = audit(tl)
    truth = truth_bubble(tl)
    for r in res.ranks:
        assert r.bubble == pytest.approx(truth[r.rank], abs=1e-9)
    assert res.schedule_source == "detected"
    # with M < P 1F1B is still 1F1B (DeepSpeed and Megatron-core run it; torch's class does not)
    assert res.schedule == name
    # free communication and the placement's own durations: the replay is the measurement
    assert res.bubble.replay_ideal == pytest.approx(res.bubble.measured, abs=1e-9)
    assert res.bubble.overhead_part == pytest.approx(0.0, abs=1e-9)
    if slow is None:
        P, M = len(orders), len(orders[0]) // 2
        assert res.bubble.theory == pytest.approx((P - 1) / (M + P - 1))
        assert res.bubble.measured == pytest.approx(res.bubble.theory, abs=1e-9)
    else:
        assert any(f.code == "STAGE_IMBALANCE" and f.stage == slow for f in res.findings)


def test_latency_is_overhead_not_imbalance():
    tl = timeline(one_f_one_b_orders(4, 8), steps=2, latency=400)
    res = audit(tl)
    assert res.bubble.imbalance_part == pytest.approx(0.0, abs=1e-9)
    assert res.bubble.overhead_part > 0.05
    assert any(f.code == "EXPOSED_COMMUNICATION" for f in res.findings)


def test_replicas_the_job_waits_for_the_slowest():
    fast = timeline(one_f_one_b_orders(2, 4), steps=2, replicas=2)
    slow_copy = timeline(one_f_one_b_orders(2, 4), steps=2, dur=_slow(1, 2.0))
    ranks = fast.ranks[:2] + [dataclasses.replace(rt, rank=rt.rank + 2,
                                                  actions=rt.actions.with_columns(
                                                      rank=rt.actions["rank"] + 2))
                              for rt in slow_copy.ranks]
    tl = Timeline(ranks=ranks, layout=fast.layout, step_evidence=fast.step_evidence)
    res = audit(tl)
    assert len(res.pipelines) == 2 and res.job["slowest_pipeline"] == 1
    assert res.job["slowest_stage"] == 1
    assert res.steps[0].step_time_us == pytest.approx(max(p.step_time_us for p in res.pipelines))
    assert any(f.code == "SLOW_PIPELINE_REPLICA" for f in res.findings)
    truth = truth_bubble(tl)
    for r in res.ranks:
        assert r.bubble == pytest.approx(truth[r.rank], abs=1e-9)


def test_a_rank_alone_is_measured_in_its_own_window():
    full = timeline(one_f_one_b_orders(4, 8), steps=2)
    alone = Timeline(ranks=[full.ranks[2]], layout=full.layout, step_evidence=full.step_evidence)
    res = audit(alone)
    (r,) = res.ranks
    a = full.ranks[2].actions.filter(full.ranks[2].actions["step"] == 0)
    own = int(a["compute_end"].max() - a["compute_start"].min())
    busy = int((a["compute_end"] - a["compute_start"]).sum())
    assert r.bubble_by_step[0] == pytest.approx(1 - busy / own)
    assert r.bubble_scope == "own window" and res.num_ranks == 4 and res.ranks_missing == [0, 1, 3]
    assert res.bubble.replay_ideal is None
    assert not any(f.code in ("BUBBLE_ABOVE_THEORY", "SCHEDULE_ORDER_VIOLATION") for f in res.findings)


ORDERS = [pytest.param(one_f_one_b_orders(4, 8), "1f1b", id="1f1b-P4-M8"),
          pytest.param(one_f_one_b_orders(4, 2), "1f1b", id="1f1b-P4-M2"),  # M < P
          pytest.param(gpipe_orders(3, 5), "gpipe", id="gpipe-P3-M5")]


def _uneven(s, k, m):
    """Stage s runs 1 + s/2 times slower than stage 0; B takes twice F."""
    return int(BASE[k] * (1 + s / 2))


@pytest.mark.parametrize("orders,kind", ORDERS)
@pytest.mark.parametrize("latency", [0, 300])
@pytest.mark.parametrize("dur", [None, _uneven], ids=["even", "uneven"])
def test_steps_compute_and_bubble_are_the_placements(orders, kind, latency, dur):
    """Step times, per-rank compute and bubble are the placement's, whatever the latency and
    the stages' speeds; every step is audited on its own."""
    steps = 3
    tl = timeline(orders, steps=steps, latency=latency, dur=dur)
    res = audit(tl)
    P, M = len(orders), len(orders[0]) // 2
    assert [s.step for s in res.steps] == list(range(steps))
    for k, st in enumerate(res.steps):
        acts = [rt.actions.filter(rt.actions["step"] == k) for rt in tl.ranks]
        lo = min(int(a["compute_start"].min()) for a in acts)
        hi = max(int(a["compute_end"].max()) for a in acts)
        assert st.step_time_us == pytest.approx((hi - lo) / 1000)
    truth = truth_bubble(tl)
    durations = dur or (lambda s, k, m: BASE[k])
    for r in res.ranks:
        assert len(r.bubble_by_step) == steps
        assert r.bubble == pytest.approx(truth[r.rank], abs=1e-9)
        assert r.compute_us == pytest.approx(steps * sum(durations(*a) for a in orders[r.rank]))
    # the order and the durations fix the replay: latency shows as overhead, never as imbalance
    free = audit(timeline(orders, steps=steps, dur=dur)).bubble
    assert res.bubble.replay_ideal == pytest.approx(free.replay_ideal, abs=1e-9)
    assert res.bubble.imbalance_part == pytest.approx(free.imbalance_part, abs=1e-9)
    assert res.bubble.overhead_part == pytest.approx(res.bubble.measured - res.bubble.replay_ideal)
    if latency:
        assert res.bubble.overhead_part > 0
    else:
        assert res.bubble.overhead_part == pytest.approx(0.0, abs=1e-9)
    if dur is None:
        assert res.bubble.imbalance_part == pytest.approx(0.0, abs=1e-9)
        assert res.bubble.replay_ideal == pytest.approx((P - 1) / (M + P - 1))


@pytest.mark.parametrize("orders,kind", ORDERS)
@pytest.mark.parametrize("dur", [None, _uneven], ids=["even", "uneven"])
def test_actions_and_peak_in_flight_per_stage(orders, kind, dur):
    """Each stage runs M forwards and M backwards a step; 1F1B holds min(M, P - s) activations
    on stage s, GPipe all M, whatever the durations."""
    steps = 2
    res = audit(timeline(orders, steps=steps, latency=200, dur=dur))
    P, M = len(orders), len(orders[0]) // 2
    for st in res.stages:
        assert st.actions["F"] == st.actions["B"] == M * steps
        assert st.peak_inflight == (M if kind == "gpipe" else min(M, P - st.stage))
        assert st.expected_peak_inflight == st.peak_inflight


def test_compute_sets_merged_in_batches_are_the_same(tmp_path, monkeypatch):
    """Ranks merged a few at a time (a batch ends inside a rank's run of steps) give the
    compute sets, windows and bubbles of all ranks merged at once."""
    import pipeaudit
    from pipeaudit.audit import windows
    from tests.support.builders import build_replicas, one_f_one_b_orders

    built = build_replicas(tmp_path, one_f_one_b_orders(4, 8), dp=2, latency=150, steps=3)
    run = pipeaudit.load(built.directory)
    ranks, steps = run.timeline.ranks, run.timeline.steps
    whole = windows.computes_by_rank(ranks, steps)
    at_once = run.audit().to_dict()
    monkeypatch.setattr(windows, "MERGE_BATCH_ROWS", 7)
    batched = windows.computes_by_rank(ranks, steps)
    assert whole.keys() == batched.keys()
    for r in whole:
        for k in steps:
            assert all(np.array_equal(a, b) for a, b in zip(whole[r][k], batched[r][k]))
        assert any(whole[r][k][0].size for k in steps)
    assert pipeaudit.load(built.directory).audit().to_dict() == at_once


@pytest.mark.parametrize("P,M,v", [(4, 8, 1), (4, 3, 1), (4, 8, 2)])
def test_schedule_detection_finds_each_catalogue_order_and_keeps_only_what_it_found(P, M, v):
    """Every catalogue schedule's own order is detected as itself (and as any schedule whose
    order is the same), an order with two actions swapped as none, and detection leaves in
    the catalogue's cache only the schedules it found, not every candidate it screened."""
    from pipeaudit.audit.schedule_fit import detect_on_positions
    from pipeaudit.errors import ScheduleError
    from pipeaudit.schedules import SCHEDULE_NAMES, build_schedule
    from pipeaudit.schedules import catalogue

    checked = 0
    for name in SCHEDULE_NAMES:
        try:  # detection asks for v > 1 only (v = 1: each schedule's default chunks)
            sched = build_schedule(name, P, M, v if v > 1 else None)
        except ScheduleError:
            continue
        if sched.chunks != v:
            continue
        orders = {p: list(o) for p, o in enumerate(sched.orders)}
        stage_pos = dict(enumerate(sched.placement))
        catalogue._build.cache_clear()
        found = detect_on_positions(orders, stage_pos, P, M, v)
        assert name in found
        assert all(build_schedule(n, P, M, v if v > 1 else None).orders == sched.orders
                   for n in found)
        assert catalogue._build.cache_info().currsize == len(found)
        swapped = dict(orders)
        o = list(orders[P - 1])
        i = next(i for i in range(len(o) - 1) if o[i] != o[i + 1])
        o[i], o[i + 1] = o[i + 1], o[i]
        swapped[P - 1] = o
        assert name not in detect_on_positions(swapped, stage_pos, P, M, v)
        checked += 1
    assert checked >= 3


@pytest.mark.parametrize("P,M", [(3, 3), (4, 6)])
def test_a_schedule_of_free_chunks_at_one_chunk_is_detected_where_no_one_stage_schedule_runs_it(P, M):
    """Looped BFS over one chunk per rank runs its backwards in reverse: no one-stage order, so
    it is detected as itself (built with one chunk, not its default two); interleaved 1F1B over
    one chunk runs a one-stage schedule's order (eager 1F1B's), which is reported alone."""
    from pipeaudit.audit.schedule_fit import detect_on_positions
    from pipeaudit.schedules import build_schedule
    from pipeaudit.schedules.catalogue import CATALOGUE

    found = {}
    for name in ("looped-bfs", "interleaved-1f1b"):
        sched = build_schedule(name, P, M, 1)
        assert sched.chunks == 1
        orders = {p: list(o) for p, o in enumerate(sched.orders)}
        found[name] = detect_on_positions(orders, dict(enumerate(sched.placement)), P, M, 1)
    assert found["looped-bfs"] == ["looped-bfs"]
    assert found["interleaved-1f1b"] and all(CATALOGUE[n].fixed_chunks == 1
                                             for n in found["interleaved-1f1b"])
