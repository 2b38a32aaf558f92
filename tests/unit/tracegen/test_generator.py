"""The generator itself (tests/support/tracegen): its orders are torch's, its runs keep every
dependency, and its truth follows docs/metrics.md's definitions."""

from __future__ import annotations

import random

import pytest

from tests.support.tracegen import Case, generate
from tests.support.tracegen.orders import SCHEDULES, compute_orders, placement, torch_accepts, valid
from tests.support.tracegen.truth import accepted, union_length


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_valid_is_what_torch_accepts(schedule: str) -> None:
    rng = random.Random(schedule)
    for _ in range(12):
        pp, v = rng.randint(2, 5), rng.randint(1, 4)
        m = rng.randint(1, 4 * pp)
        assert valid(schedule, pp, v, m) == torch_accepts(schedule, pp, v, m), (schedule, pp, v, m)


def test_orders_are_torchs() -> None:
    # torch 2.13's ScheduleZBVZeroBubble at P = 2, M = 4, rank 0 (V placement: stages 0 and 3)
    r0 = [f"{a.stage}{a.kind}{a.mb}" for a in compute_orders("zbv", 2, 2, 4)[0]]
    assert r0[:6] == ["0F0", "0F1", "0F2", "3F0", "3I0", "3W0"]
    assert placement("zbv", 2, 2) == {0: 0, 1: 1, 2: 1, 3: 0}
    one = [f"{a.stage}{a.kind}{a.mb}" for a in compute_orders("1f1b", 4, 1, 8)[1]]
    assert one[:5] == ["1F0", "1F1", "1F2", "1B0", "1F3"]  # P - s warm-up forwards


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("p2p", ["gloo", "nccl"])
@pytest.mark.parametrize("batched", [False, True])
def test_runs_keep_every_dependency(schedule: str, p2p: str, batched: bool) -> None:
    pp, v = 3, (1 if schedule in ("gpipe", "1f1b") else 2)
    m = 6
    g = generate(Case(schedule, pp, v, m, p2p=p2p, batched=batched, steps=2, seed=3))
    n_stages = pp * v
    span = {}
    for run in g.runs:
        assert len(run.actions) == 2 * len(compute_orders(schedule, pp, v, m)[run.position])
        for st, kind, mb, k, _, t0, t1 in run.actions:
            if t0 is not None:
                span[(st, kind, mb, k)] = (t0, t1)
    assert span
    for (st, kind, mb, k), (t0, _) in span.items():
        before = []
        if kind == "F" and st > 0:
            before = [(st - 1, "F", mb, k)]
        elif kind in ("B", "I") and st < n_stages - 1:
            before = [(st + 1, x, mb, k) for x in ("B", "I")] + [(st, "F", mb, k)]
        elif kind == "W":
            before = [(st, "I", mb, k)]
        for dep in before:
            if dep in span:
                assert span[dep][1] <= t0, (dep, "before", (st, kind, mb, k))
    for (_, _), (w0, w1) in g.truth.windows.items():
        assert w1 > w0
    assert all(0.0 <= b < 1.0 for b in g.truth.rank_bubble.values())


def test_truth_is_metrics_definition() -> None:
    assert union_length([(0, 2), (1, 3), (5, 6)]) == 4
    g = generate(Case("1f1b", 2, 1, 2, seed=1))
    tr = g.truth
    w0, w1 = tr.windows[(0, 0)]
    for run in g.runs:
        c = union_length(run.compute[0])
        assert tr.rank_bubble[run.rank] == pytest.approx(1 - c / (w1 - w0))
        assert min(a for a, _ in run.compute[0]) >= w0 and max(b for _, b in run.compute[0]) <= w1
    assert w0 == min(a for r in g.runs for a, _ in r.compute[0])


def test_accepted_names_share_the_order() -> None:
    assert accepted("gpipe", 4, 1, 1) >= {"gpipe", "1f1b", "naive"}
    assert "1f1b" not in accepted("gpipe", 4, 1, 8)
    assert accepted("interleaved-zb", 3, 1, 6) >= {"interleaved-zb", "zb-h1"}
    # without annotations microbatches follow execution order: looped BFS's reversed
    # backwards at v = 1 look like GPipe's; with them they do not
    assert "gpipe" in accepted("looped-bfs", 2, 1, 2, None, False)
    assert "gpipe" not in accepted("looped-bfs", 2, 1, 2)
    # one rank's file: rank 0 of interleaved 1F1B at v = 1, M < P runs 1F1B's order
    assert "1f1b" in accepted("interleaved-1f1b", 6, 1, 4, 0)
