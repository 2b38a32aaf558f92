"""Single-process runs whose stages take turns on one device (the CPU, or one GPU).

Known answers, built in the test: on one device the ideal step is the stages' compute back to
back, so stage s's replay bubble is 1 - C_s / sum(C) and the theory (P-1)/P; what the host
adds between actions is host overhead (HOST_OVERHEAD), never communication.
"""

from __future__ import annotations

import pytest

import pipeaudit
from pipeaudit.harness.plans import parse_action, single_process_order
from tests.support.builders import build_one_device_run

US = 1.0


def _order(schedule: str, P: int, M: int) -> list[tuple[int, str, int]]:
    return [parse_action(a) for a in single_process_order(schedule, P, M)]


def _speeds(P: int, slow: int) -> dict[int, int]:
    return {s: (3 if s == slow else 1) for s in range(P)}


@pytest.mark.parametrize("gpu", [True, False], ids=["one_gpu", "cpu"])
@pytest.mark.parametrize("schedule, P, M, slow", [
    ("gpipe", 2, 4, None), ("1f1b", 4, 8, 1), ("gpipe", 4, 2, 3), ("naive", 3, 3, 0),
])
@pytest.mark.parametrize("host", ["fast", "slow"])
@pytest.mark.parametrize("shuffle", [None, 7])
def test_stages_on_one_device(tmp_path, gpu, schedule, P, M, slow, host, shuffle):
    order = _order(schedule, P, M)
    speed = _speeds(P, slow)
    base = {"F": 400, "B": 800}

    def dur(s, k, m):
        return speed[s] * base[k]

    # a fast host issues ahead of the device (gaps of 10 µs); a slow one spends 3 ms per
    # action, longer than any kernel: the device then waits for it
    gap = 10 if host == "fast" else 3000
    built = build_one_device_run(tmp_path, order, dur=dur, host_us=lambda i: gap, gpu=gpu,
                                 shuffle_seed=shuffle)
    result = pipeaudit.load(built.files[0]).audit()
    assert (result.num_ranks, result.num_stages, result.num_microbatches) == (P, P, M)
    assert result.num_steps == 2 and result.schedule == schedule

    # each stage's compute, and the step window the stages share
    per_stage = {s: sum(dur(s2, k, m) for (s2, k, m) in order if s2 == s) for s in range(P)}
    total = sum(per_stage.values())
    ideal = {s: 1 - per_stage[s] / total for s in range(P)}
    truth = built.true_bubble()
    for r in result.ranks:
        assert r.bubble == pytest.approx(truth[r.rank], abs=0.002)
        assert r.replay_bubble == pytest.approx(ideal[r.rank], abs=1e-9)
    assert result.bubble.replay_ideal == pytest.approx(sum(ideal.values()) / P, abs=1e-9)
    assert result.bubble.theory == pytest.approx((P - 1) / P)
    assert "stages share" in result.bubble.theory_formula
    device = "one GPU" if gpu else "the CPU"
    assert any(f"taking turns on {device}" in n for n in result.notes)

    codes = {f.code for f in result.findings}
    assert "EXPOSED_COMMUNICATION" not in codes  # one process: nothing is communicated
    overhead = result.bubble.measured - result.bubble.replay_ideal
    if host == "fast":  # the device (almost) never waits: measured is about the ideal
        assert overhead == pytest.approx(0.0, abs=0.03)
        assert "HOST_OVERHEAD" not in codes
    else:  # the device waits for the host before every action
        assert overhead > 0.1
        assert "HOST_OVERHEAD" in codes
    if slow is not None and P > 1:
        # an uneven stage shows as the imbalance part (replay above theory), not as overhead
        assert result.bubble.imbalance_part == pytest.approx(
            sum(ideal.values()) / P - (P - 1) / P, abs=1e-9)
