"""The stage-to-stage link: latency and bandwidth fitted on timed transfers, and what-if
predictions at another microbatch size moving each cross-rank delay by the message's change."""

from __future__ import annotations

import json

import pytest

import pipeaudit
from pipeaudit.explain import Changes, whatif
from pipeaudit.explain.link import activation_bytes, fit_link, manifest_link, message_bytes
from tests.support.builders import build_run, gpipe_orders, one_f_one_b_orders

P = 4
MODEL = {"batch_size": 64, "seq_len": 64, "hidden": 256}  # 0.524 MB per message at M = 8
#: 1.048576 GB/s: the 0.524 MB a message gains from M = 8 to M = 4 takes 500 us more
BANDWIDTH = 2 ** 20 * 1e3


def timed(latency_s: float, bandwidth: float, sizes=(1e5, 1e6, 4e6), repeats: int = 5):
    return [[b, latency_s + b / bandwidth] for b in sizes for _ in range(repeats)]


def test_fit_recovers_latency_and_bandwidth():
    link = fit_link(timed(50e-6, 4e9))
    assert link.latency_s == pytest.approx(50e-6)
    assert link.bandwidth == pytest.approx(4e9)
    assert (link.sizes, link.transfers) == (3, 15)
    assert link.delay_change_ns(1e6, 3e6) == pytest.approx(2e6 / 4e9 * 1e9)
    assert link.delay_change_ns(3e6, 1e6) == pytest.approx(-2e6 / 4e9 * 1e9)


def test_fit_takes_each_sizes_median():
    """A slow outlier at one size (a descheduled rank) does not bend the line."""
    samples = timed(20e-6, 2e9) + [[1e6, 0.5]]
    link = fit_link(samples)
    assert link.bandwidth == pytest.approx(2e9)
    assert link.latency_s == pytest.approx(20e-6)


def test_one_size_or_no_growth_scales_nothing():
    assert fit_link([[1e6, 1e-3]] * 5) is None
    flat = fit_link([[1e5, 1e-3], [1e6, 1e-3], [4e6, 0.9e-3]])
    assert flat.bandwidth is None and flat.delay_change_ns(1e6, 4e6) == 0.0


def test_manifest_link_reads_only_well_formed_samples():
    assert manifest_link(None) is None
    assert manifest_link({"p2p_link": None}) is None
    assert manifest_link({"p2p_link": {"samples": "x"}}) is None
    assert manifest_link({"p2p_link": {"samples": [["a", 1]]}}) is None
    assert manifest_link({"p2p_link": {"samples": timed(0.0, 1e9)}}).bandwidth == pytest.approx(1e9)


def test_every_harness_framework_sends_its_blocks_activations():
    """The link scales any harness run's delays; only torch's runtime's held messages are
    modelled in memory (message_bytes)."""
    for name in ("deepspeed", "megatron-core"):
        man = {"model": MODEL, "framework": {"name": name}}
        assert activation_bytes(man, 8) == 8 * 64 * 256 * 4
        assert message_bytes(man, 8) is None
    assert message_bytes({"model": MODEL}, 8) == activation_bytes({"model": MODEL}, 8)
    assert activation_bytes({"model": {"hidden": 256}}, 8) is None


def _with_manifest(built, link_samples) -> pipeaudit.Run:
    man = {"model": MODEL}
    if link_samples is not None:
        man["p2p_link"] = {"samples": link_samples}
    (built.directory / "manifest.json").write_text(json.dumps(man))
    return pipeaudit.load(built.directory)


@pytest.mark.parametrize("M_new,sched", [(4, "1f1b"), (4, "gpipe"), (16, "1f1b")])
def test_delays_move_by_the_message_change_over_the_bandwidth(tmp_path, M_new, sched):
    """Known answer: a run at M = 8 whose delays are 400 us, on a link of 1.048576 GB/s, lands
    on the built run at M_new whose every delay is 400 us + (its message - 0.524 MB) / bandwidth
    (and whose compute scales with the rows); without the timed link it cannot."""
    src = build_run(tmp_path, one_f_one_b_orders(P, 8), latency=400, name="src")
    change_us = (message_bytes({"model": MODEL}, M_new) - message_bytes({"model": MODEL}, 8)) \
        / BANDWIDTH * 1e6
    assert change_us == pytest.approx(500 if M_new == 4 else -250)
    k = 8 / M_new
    orders = gpipe_orders(P, M_new) if sched == "gpipe" else one_f_one_b_orders(P, M_new)
    dst = build_run(tmp_path, orders, latency=int(400 + change_us), name="dst",
                    dur=lambda s, kind, m: int((1000 if kind == "F" else 2000) * k))
    truth = pipeaudit.load(dst.directory).audit().step_time_us
    changes = Changes(microbatches=M_new, schedule=sched)

    pred = whatif(_with_manifest(src, timed(50e-6, BANDWIDTH)).timeline, changes)
    assert pred.predicted_step_time_us == pytest.approx(truth, rel=0.01)
    assert any(f"each {change_us:+.0f} us for its message" in a for a in pred.assumptions)

    kept = whatif(_with_manifest(src, None).timeline, changes)
    assert abs(kept.predicted_step_time_us / truth - 1) > 0.02
    assert any("not rescaled" in a and "timed no link" in a for a in kept.assumptions)


def test_the_unchanged_size_keeps_the_measured_delays(tmp_path):
    src = build_run(tmp_path, one_f_one_b_orders(P, 8), latency=200, name="src")
    run = _with_manifest(src, timed(50e-6, BANDWIDTH))
    pred = whatif(run.timeline, Changes(schedule="gpipe"))
    plain = whatif(_with_manifest(src, None).timeline, Changes(schedule="gpipe"))
    assert pred.predicted_step_time_us == plain.predicted_step_time_us
