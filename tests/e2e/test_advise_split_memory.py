"""The advise memory model across a split backward, on real runs: a run of 1F1B predicts the
peak of the same model under ZBV (I then W), and a ZBV run the peak under 1F1B."""

from __future__ import annotations

import pytest

from tests.support.cli import invoke

pytest.importorskip("torch")
pytestmark = pytest.mark.slow

MODEL = ["-P", "2", "-M", "4", "--layers", "4", "--hidden", "128", "--seq-len", "64",
         "--batch-size", "32", "--steps", "2", "--profile-memory"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = {}
    for schedule in ("1f1b", "zbv"):
        path = tmp_path_factory.mktemp(schedule)
        res = invoke("profile", "--schedule", schedule, *MODEL, "--out", path, "--force")
        assert res.exit_code == 0, res.output
        out[schedule] = path
    return out


def test_a_split_run_shows_what_its_i_holds_until_its_w(runs):
    import pipeaudit
    from pipeaudit.advise.memory import (
        SPLIT_HOLD, held_by_runtime, net_of_messages, rank_memory, split_hold_ratio,
    )
    from pipeaudit.explain.link import message_bytes
    from pipeaudit.schedules import build_schedule

    tl = pipeaudit.load(runs["zbv"]).timeline
    memory = rank_memory(tl)
    raw, measured = split_hold_ratio(memory)
    net = net_of_messages(memory, build_schedule("zbv", 2, 4, 2).placement, 4,
                          message_bytes(tl.manifest, 4), held_by_runtime("zbv"))
    ratio, _ = split_hold_ratio(net)
    # the gradients of the weight operations' outputs (fc1: 4h, fc2: h, the norm: h per row)
    # against what a block's forward keeps: the default's premise, on the run itself, once the
    # input gradient each I sent (and the runtime kept) is taken out
    assert measured and ratio == pytest.approx(SPLIT_HOLD, abs=0.1) and ratio < raw
    assert split_hold_ratio(rank_memory(pipeaudit.load(runs["1f1b"]).timeline)) == (SPLIT_HOLD, False)


@pytest.mark.parametrize("source,target", [("1f1b", "zbv"), ("zbv", "1f1b")])
def test_the_peak_is_predicted_across_a_split_backward(runs, source, target):
    import pipeaudit
    from pipeaudit.advise import advise

    a = advise(pipeaudit.load(runs[source]), schedules=[target], microbatches=[4])
    # the same layers a stage as the target run (the advisor may also propose an uneven split,
    # from per-layer times that a busy host moves; its peak is another model's)
    cand = next(c for c in a.candidates
                if c.schedule == target and len(set(c.stage_layers or ())) <= 1)
    peak = max(r.peak_allocated_bytes for r in pipeaudit.load(runs[target]).audit().ranks)
    assert cand.predicted_peak_memory_bytes == pytest.approx(peak, rel=0.05)
