"""GPU (kernel-level) traces give the same audit as the CPU trace of the same run.

Each case builds one run twice from the same independent placement (``tests/support/builders.py``):
as a CPU trace (ops, gloo spans) and as a Kineto GPU trace (kernels launched ahead by the
CPU, GPU copies of every annotation, backward kernels launched from the autograd thread on a
second stream, NCCL kernels covering the recv waits). The truth is the placement itself.
"""

from __future__ import annotations

import pytest

import pipeaudit
from tests.support.builders import build_gpu_run, build_run, gpipe_orders, one_f_one_b_orders
from pipeaudit.schedules import build_schedule


def _orders(name: str, P: int, M: int, v: int | None = None):
    sched = build_schedule(name, P, M, v)
    return ([[(a.stage, a.kind, a.microbatch) for a in o] for o in sched.orders],
            list(sched.placement))


CASES = {
    "1f1b": lambda: (one_f_one_b_orders(4, 8), None, 8),
    "gpipe": lambda: (gpipe_orders(4, 8), None, 8),
    "interleaved-1f1b": lambda: (*_orders("interleaved-1f1b", 2, 4, 2), 4),
    "zbv": lambda: (*_orders("zbv", 2, 4), 4),
}


def _audit(directory):
    run = pipeaudit.load(directory)
    return run, run.audit()


def _stage_rows(result):
    return {s.stage: (s.actions, s.peak_inflight, s.expected_peak_inflight,
                      {k: round(v, 3) for k, v in s.mean_compute_us.items()}) for s in result.stages}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("variant", ["plain", "slow-stage-latency"])
def test_gpu_trace_audits_like_the_cpu_trace(tmp_path, name, variant):
    orders, placement, M = CASES[name]()
    kw = dict(placement=placement, steps=2)
    if variant == "slow-stage-latency":
        kw.update(latency=700, dur=lambda s, k, m: (4 if s == 1 else 1) * {"F": 1000, "B": 2000,
                                                                           "I": 1000, "W": 1000}[k])
    cpu = build_run(tmp_path, orders, name="cpu", rendezvous=True, **kw)
    gpu = build_gpu_run(tmp_path, orders, name="gpu", **kw)
    assert cpu.compute == gpu.compute  # the same run
    cpu_run, c = _audit(cpu.directory)
    gpu_run, g = _audit(gpu.directory)
    assert g.device_type == "cuda" and c.device_type == "cpu"
    # one action per span: M of each kind per stage and step, as on the CPU trace
    steps = 2
    for st in g.stages:
        assert st.actions["F"] == M * steps
        assert st.actions["B"] + st.actions["I"] == M * steps
    assert _stage_rows(g) == _stage_rows(c)
    assert g.schedule == c.schedule and g.schedule_source == "detected"
    assert name in g.detected_schedules
    assert g.bubble.theory is not None and g.bubble.theory == pytest.approx(c.bubble.theory)
    assert g.bubble.replay_ideal is not None
    assert g.bubble.replay_ideal == pytest.approx(c.bubble.replay_ideal, abs=1e-9)
    truth = gpu.true_bubble()
    for r in g.ranks:
        assert r.bubble == pytest.approx(truth[r.rank], abs=0.005)
    assert [r.bubble for r in g.ranks] == pytest.approx([r.bubble for r in c.ranks], abs=1e-9)
    assert {(f.code, f.rank, f.stage) for f in g.findings} == {(f.code, f.rank, f.stage) for f in c.findings}
    assert not any(f.code in ("DUPLICATED_ACTIONS", "SCHEDULE_ORDER_VIOLATION", "MEMORY_ABOVE_THEORY")
                   for f in g.findings)
    # on the device: actions are drawn where their kernels ran, after the host issued them
    acts = gpu_run.actions()
    assert (acts["start"] >= acts["host_start"]).all()
    assert (acts["compute_start"] == acts["start"]).all()


@pytest.mark.parametrize("variant", ["shuffled", "old-nccl-names", "lost-launches", "bare-p2p-ops"])
def test_gpu_trace_variants(tmp_path, variant):
    """Event order, kernel names, launches missing from the trace (kernels found through their
    GPU copy), P2P without runtime spans: the same numbers."""
    kw = {"shuffled": dict(shuffle=True), "old-nccl-names": dict(nccl="old"),
          "lost-launches": dict(drop_launches=0.5, seed=3), "bare-p2p-ops": dict(p2p="ops")}[variant]
    orders = one_f_one_b_orders(4, 8)
    cpu = build_run(tmp_path, orders, name="cpu", rendezvous=True, latency=300, steps=2)
    gpu = build_gpu_run(tmp_path, orders, name="gpu", latency=300, steps=2, **kw)
    _, c = _audit(cpu.directory)
    _, g = _audit(gpu.directory)
    assert _stage_rows(g) == _stage_rows(c)
    assert g.schedule == "1f1b" and g.bubble.theory == pytest.approx(3 / 11)
    truth = gpu.true_bubble()
    for r in g.ranks:
        assert r.bubble == pytest.approx(truth[r.rank], abs=0.005)


def test_gpu_trace_m_below_p(tmp_path):
    orders = one_f_one_b_orders(4, 2)
    gpu = build_gpu_run(tmp_path, orders, latency=100, steps=2)
    _, g = _audit(gpu.directory)
    assert g.num_microbatches == 2 and g.num_ranks == 4
    for st in g.stages:
        assert st.actions["F"] == 4 and st.actions["B"] == 4
    truth = gpu.true_bubble()
    for r in g.ranks:
        assert r.bubble == pytest.approx(truth[r.rank], abs=0.005)


def _recv_truth(built):
    """Per rank and per receiving stage: (waiting, transfer) in µs, from the placement."""
    by_rank, by_stage = {}, {}
    for r, rows in built.extra["recv"].items():
        for stage, kind, mb, start, end, wait, transfer in rows:
            w, t = by_rank.get(r, (0, 0))
            by_rank[r] = (w + wait, t + transfer)
            w, t = by_stage.get(stage, (0, 0))
            by_stage[stage] = (w + wait, t + transfer)
    return by_rank, by_stage


@pytest.mark.parametrize("variant", ["nccl-metadata", "runtime-spans", "ops-only"])
def test_recv_waiting_and_transfer(tmp_path, variant):
    """Each recv kernel matched with its send: waiting (before the send started) and transfer,
    exact on the built trace, per rank and per stage, summing to the recv kernels' time."""
    kw = {"nccl-metadata": dict(p2p="ops", p2p_args=True),
          "runtime-spans": dict(p2p="runtime", p2p_args=False),
          "ops-only": dict(p2p="ops", p2p_args=False)}[variant]
    built = build_gpu_run(tmp_path, one_f_one_b_orders(4, 8), latency=250, steps=2,
                          dur=lambda s, k, m: (3 if s == 2 else 1) * {"F": 1000, "B": 2000}[k], **kw)
    result = pipeaudit.load(built.directory).audit()
    by_rank, by_stage = _recv_truth(built)
    for r in result.ranks:
        if r.rank not in by_rank:
            assert r.recv_wait_us is None
            continue
        assert r.recvs_matched == r.recvs > 0
        assert (r.recv_wait_us, r.recv_transfer_us) == pytest.approx(by_rank[r.rank], abs=1e-6)
    for st in result.stages:
        if st.stage in by_stage:
            assert (st.recv_wait_us, st.recv_transfer_us) == pytest.approx(by_stage[st.stage], abs=1e-6)
    # transfer is the built latency (+1 µs) per recv; the rest of each recv kernel is waiting
    assert sum(t for _, t in by_rank.values()) == 251 * sum(len(v) for v in built.extra["recv"].values())


@pytest.mark.parametrize("skew_us", [-7000, 2500, 40000])
def test_clock_skew_between_two_hosts_is_corrected(tmp_path, skew_us):
    orders = one_f_one_b_orders(4, 8)
    hosts = {0: "node-a", 1: "node-a", 2: "node-b", 3: "node-b"}
    built = build_gpu_run(tmp_path, orders, latency=200, steps=2, hosts=hosts,
                          clock_offset_us={"node-b": skew_us})
    result = pipeaudit.load(built.directory).audit()
    assert result.clock is not None and result.clock["reference_host"] == "node-a"
    est = result.clock["offsets_us"]["node-b"]
    half = result.clock["uncertainty_us"]["node-b"]
    assert abs(est - skew_us) <= max(half, 1.0) and half <= 201  # within one transfer
    truth = built.true_bubble()
    for r in result.ranks:
        assert r.bubble == pytest.approx(truth[r.rank], abs=0.005)
    assert any("clock of host node-b" in n for n in result.notes)


@pytest.mark.parametrize("annotate", [True, False])
@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_single_process_two_devices_is_a_two_stage_pipeline(tmp_path, schedule, annotate):
    """One process, stages on cuda:0 and cuda:1: audited as a pipeline of the two devices,
    from the annotations' stages or, without annotations, from the kernels' devices."""
    from tests.support.builders import build_single_process_run

    orders = gpipe_orders(2, 4) if schedule == "gpipe" else one_f_one_b_orders(2, 4)
    built = build_single_process_run(tmp_path, orders, latency=150, annotate=annotate,
                                     dur=lambda s, k, m: (2 if s == 1 else 1) * {"F": 1000, "B": 2000}[k])
    result = pipeaudit.load(built.files[0]).audit()
    if not annotate:  # no action without annotations or point-to-point ops to infer from
        assert not result.pipeline_found
        return
    assert result.num_ranks == 2 and result.num_stages == 2 and result.num_microbatches == 4
    assert result.num_steps == 2 and result.schedule == schedule
    assert not result.ranks_missing
    truth = built.true_bubble()
    for r in result.ranks:
        assert r.bubble == pytest.approx(truth[r.rank], abs=0.005)
    assert any("single-process pipeline over 2 devices" in n for n in result.notes)
    assert result.bubble.replay_ideal is not None


@pytest.mark.parametrize("steps_marked", [True, False])
def test_unannotated_gpu_run(tmp_path, steps_marked):
    """torch's own Schedule1F1B on GPUs: no PP: span, no GPU copy; F/B from the host ops (the
    backward on the autograd thread), compute from the kernels they launch."""
    orders = one_f_one_b_orders(4, 8)
    built = build_gpu_run(tmp_path, orders, latency=200, steps=2, annotate=False,
                          with_profiler_steps=steps_marked,
                          dur=lambda s, k, m: (4 if s == 0 else 1) * {"F": 1000, "B": 2000}[k])
    result = pipeaudit.load(built.directory).audit()
    assert result.actions_inferred and result.schedule == "1f1b"
    assert (result.num_ranks, result.num_microbatches, result.num_steps) == (4, 8, 2)
    for st in result.stages:
        assert st.actions["F"] == 16 and st.actions["B"] == 16
    truth = built.true_bubble()
    for r in result.ranks:
        assert r.bubble == pytest.approx(truth[r.rank], abs=0.005)
