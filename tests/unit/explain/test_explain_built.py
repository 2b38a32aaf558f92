"""Critical path, slack, causes and what-if on built traces whose answer is known."""

from __future__ import annotations

import pytest

import pipeaudit
from tests.support.builders import build_run, gpipe_orders, one_f_one_b_orders
from pipeaudit.explain import Changes, critical_path, explain, whatif
from pipeaudit.explain.critical import COMM, COMPUTE, HOST
from pipeaudit.explain.explain import prepared_graphs
from pipeaudit.explain.model import StepModel, measured_model, run_model

P, M = 4, 8


def slow_stage(s_slow: int, factor: int = 3):
    return lambda s, k, m: (factor if s == s_slow else 1) * (1000 if k == "F" else 2000)


@pytest.fixture(scope="module", params=[False, True], ids=["cpu", "gpu"])
def gpu(request):
    """CPU traces (compute = top-level ops) and GPU traces (compute = kernels)."""
    return request.param


@pytest.fixture(scope="module")
def slow_run(tmp_path_factory, gpu):
    built = build_run(tmp_path_factory.mktemp("slow"), one_f_one_b_orders(P, M),
                      dur=slow_stage(2), latency=100, steps=2, gpu=gpu)
    return pipeaudit.load(built.directory)


@pytest.fixture(scope="module")
def balanced_run(tmp_path_factory, gpu):
    built = build_run(tmp_path_factory.mktemp("bal"), one_f_one_b_orders(P, M), latency=100,
                      steps=2, gpu=gpu)
    return pipeaudit.load(built.directory)


def test_critical_path_runs_through_the_slow_stage(slow_run):
    ex = explain(slow_run.timeline)
    assert len(ex.steps) == 2
    for p in ex.steps:
        acts = p.actions()
        on_slow = [i for i in acts if i.stage == 2]
        # every steady-state action of stage 2 but its second warm-up forward is critical
        assert len(on_slow) >= 2 * M - 1
        assert sum(i.duration_us for i in on_slow) > 0.8 * p.step_time_us
        assert acts[0].label == "0F0" and acts[-1].label == f"0B{M - 1}"
    assert (ex.top_causes[0].stage, ex.top_causes[0].kind) == (2, "B")
    assert (ex.top_causes[1].stage, ex.top_causes[1].kind) == (2, "F")
    # 10% of stage 2's B on the path is exactly the gain: the path stays critical
    c = ex.top_causes[0]
    assert c.gain_us_if_10pct_faster == pytest.approx(0.1 * c.on_path_us, rel=1e-6)


def test_path_covers_the_step_and_shares_add_up(slow_run):
    for p in explain(slow_run.timeline).steps:
        assert p.items[0].start_us == 0.0
        assert p.items[-1].end_us == pytest.approx(p.step_time_us)
        for a, b in zip(p.items, p.items[1:]):
            assert b.start_us == pytest.approx(a.end_us)
        assert p.compute_share + p.comm_share + p.other_share == pytest.approx(1.0)
        assert {i.what for i in p.items} <= {COMPUTE, COMM, HOST}


def test_comm_waits_are_the_built_latency(tmp_path):
    latency = 600
    built = build_run(tmp_path, one_f_one_b_orders(P, M), latency=latency)
    p = critical_path(pipeaudit.load(built.directory).timeline, 0)
    waits = [i for i in p.items if i.what == COMM]
    # the send takes the producer's last µs: compute ends 1 µs before the span
    assert waits and all(i.duration_us == pytest.approx(latency + 1) for i in waits)
    assert p.comm_us == pytest.approx(len(waits) * (latency + 1))
    assert len(waits) >= 2 * (P - 1)  # down the pipe and back up, at least


def test_host_delay_shows_as_host_gaps(tmp_path):
    built = build_run(tmp_path, gpipe_orders(P, M), host_delay=lambda r: 300 if r == 1 else 0)
    p = critical_path(pipeaudit.load(built.directory).timeline, 0)
    # (the builder's send takes an action's last µs: 1 µs gaps elsewhere)
    gaps = [i for i in p.items if i.what == HOST and i.duration_us > 1]
    assert gaps and all(i.rank == 1 and i.duration_us == pytest.approx(300, abs=1.5) for i in gaps)
    assert sum(i.duration_us for i in gaps) >= 300 * (M - 1)


def test_slack_is_zero_on_the_path_and_exact(slow_run):
    """Delaying an action by its slack keeps the step; 50 µs more lengthens it (the replay is
    the oracle, a forward simulation, against the backward pass)."""
    graphs, _, _ = prepared_graphs(slow_run.timeline)
    g = graphs[0]
    p = explain(slow_run.timeline).steps[0]
    on_path = {(i.rank, i.label) for i in p.actions()}
    base = _end(measured_model(g))
    assert base == g.step_time
    for s in p.slack:
        label = f"{s.stage}{s.kind}{s.microbatch}"
        if (s.rank, label) in on_path:
            assert s.slack_us == pytest.approx(0.0, abs=1e-6)
        for extra, grows in ((s.slack_us * 1000.0, False), (s.slack_us * 1000.0 + 50_000, True)):
            m = measured_model(g)
            delayed = StepModel(m.orders, m.placement, m.duration, m.compute, m.comm,
                                _delay(g, m.gap, label, extra))
            t = _end(delayed)
            assert (t > base + 1) is grows, (label, s.slack_us, t - base)


def _end(model):
    """When the replayed step ends (its start stays at 0: a late first action delays it)."""
    res = run_model(model).result
    return res.window_start + res.makespan


def _delay(g, gap, label, extra):
    """Gaps that start action ``label`` exactly ``extra`` ns after its measured start."""
    node = next(n for n in g.nodes if n.label == label)
    rank_edge = next(g.edges[e] for e in g.into[node.id] if not g.edges[e].cross)

    def f(r, a):
        return max(0, rank_edge.observed) + extra if str(a) == label else gap(r, a)
    return f


def test_whatif_scale_undoes_the_slowdown(slow_run, balanced_run):
    pred = whatif(slow_run.timeline, Changes(scale=((2, None, 0.3333),)))
    truth = balanced_run.audit()
    assert pred.predicted_step_time_us == pytest.approx(truth.step_time_us, rel=0.02)
    assert pred.predicted_bubble == pytest.approx(truth.bubble.measured, abs=0.01)
    assert pred.measured_step_time_us == pytest.approx(slow_run.audit().step_time_us)


def test_whatif_without_changes_is_the_measurement(slow_run):
    pred = whatif(slow_run.timeline, Changes())
    res = slow_run.audit()
    assert pred.predicted_step_time_us == pytest.approx(res.step_time_us, abs=1e-6)
    assert pred.predicted_bubble == pytest.approx(res.bubble.measured, abs=1e-9)
    assert pred.model == "measured steps"


def test_whatif_comm_latency_replaces_measured_delays(tmp_path):
    slow = build_run(tmp_path, one_f_one_b_orders(P, M), latency=500, name="slow")
    fast = build_run(tmp_path, one_f_one_b_orders(P, M), latency=100, name="fast")
    pred = whatif(pipeaudit.load(slow.directory).timeline, Changes(comm_latency_us=101))
    assert pred.predicted_step_time_us == pytest.approx(
        pipeaudit.load(fast.directory).audit().step_time_us, rel=0.001)


@pytest.mark.parametrize("M_new,sched", [(8, "1f1b"), (16, "1f1b"), (8, "gpipe"),
                                         (4, "gpipe")])
def test_whatif_new_order_on_uniform_built_runs(tmp_path, M_new, sched):
    """Uniform stages, fixed latency: the typical model is exact, so M and schedule changes
    must land on the built run of the target configuration (same global batch)."""
    src = build_run(tmp_path, one_f_one_b_orders(P, 8), latency=200, name="src")
    k = 8 / M_new
    dur = lambda s, kind, m: int((1000 if kind == "F" else 2000) * k)  # noqa: E731
    orders = gpipe_orders(P, M_new) if sched == "gpipe" else one_f_one_b_orders(P, M_new)
    dst = build_run(tmp_path, orders, dur=dur, latency=200, name="dst")
    pred = whatif(pipeaudit.load(src.directory).timeline,
                  Changes(microbatches=M_new, schedule=sched))
    truth = pipeaudit.load(dst.directory).audit()
    assert pred.model == "typical values"
    assert abs(pred.calibration["error"]) < 0.01
    assert pred.predicted_step_time_us == pytest.approx(truth.step_time_us, rel=0.01)
    assert pred.predicted_bubble == pytest.approx(truth.bubble.measured, abs=0.01)


def test_replay_gap_is_added_after_the_rank_is_free():
    """The additive ``gap`` keyword of pipeaudit.schedules.replay (host/launch overhead)."""
    from pipeaudit.actions import Action
    from pipeaudit.schedules import replay

    orders = [[Action(0, "F", 0), Action(0, "F", 1), Action(0, "B", 0)],
              [Action(1, "F", 0), Action(1, "B", 0)]]
    plain = replay(orders, [0, 1], {(0, "F"): 1.0, (0, "B"): 2.0, (1, "F"): 1.0, (1, "B"): 2.0},
                   0.5)
    gapped = replay(orders, [0, 1], {(0, "F"): 1.0, (0, "B"): 2.0, (1, "F"): 1.0, (1, "B"): 2.0},
                    0.5, gap=lambda r, a: 0.25 if r == 0 else 0.0)
    start = {(x.rank, str(x.action)): x.start for x in gapped.actions}
    assert start[(0, "0F0")] == 0.25 and start[(0, "0F1")] == 1.5
    assert start[(1, "1F0")] == 1.75  # 0F0 ends at 1.25, + 0.5 latency
    # 0B0 waits for 1B0 (ends 4.75) + 0.5: the gap after 0F1 (ends 2.5) does not bind
    assert start[(0, "0B0")] == 5.25
    # the step window starts at the first action: everything moved by the first gap
    assert gapped.window_start + gapped.makespan == plain.window_start + plain.makespan + 0.25
