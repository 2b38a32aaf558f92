"""The gate on built runs whose durations are known: a stage that got faster is never a
regression, a bubble rise is judged against the step time and the stage's own compute, and a
host that slowed every stage alike is named as the host."""

from __future__ import annotations

import pytest

import pipeaudit
from pipeaudit.gate import Thresholds, gate, snapshot_from_run
from pipeaudit.report.gate_text import render_gate_text
from tests.support.builders import build_run, one_f_one_b_orders

P, M, STEPS = 4, 8, 5


def dur(factors: dict[int, float] | None = None, every: float = 1.0):
    """F 1 ms, B 2 ms, times ``every`` and times ``factors[stage]``."""
    factors = factors or {}
    return lambda s, k, m: int((1000 if k == "F" else 2000) * every * factors.get(s, 1.0))


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    return tmp_path_factory.mktemp("gate_host")


def snap(tmp, name, **kw):
    return snapshot_from_run(pipeaudit.load(build_run(tmp, one_f_one_b_orders(P, M),
                                                      steps=STEPS, name=name, **kw).directory))


@pytest.fixture(scope="module")
def base(tmp):
    return snap(tmp, "base", dur=dur())


def by(result):
    return {(c.metric, c.index): c for c in result.checks}


def test_a_faster_stage_is_never_a_regression(tmp, base):
    """Stages 1 and 2 compute half as long: their ranks idle more in a step that got shorter
    (their bubbles and the pipeline's rise), and the median stage is lighter (the imbalance
    rises): every rise is cleared, with its cause, and the gate passes."""
    run = snap(tmp, "faster12", dur=dur({1: 0.5, 2: 0.5}))
    result = gate(run, base, Thresholds())
    checks = by(result)
    assert result.verdict == "pass" and result.exit_code == 0, \
        [c.explanation for c in result.checks if c.verdict != "pass"]
    assert checks[("stage_compute", 1)].change == pytest.approx(-0.5, rel=1e-3)
    assert checks[("step_time", None)].change < 0  # the step got shorter
    for key in (("rank_bubble", 1), ("rank_bubble", 2), ("bubble", None), ("imbalance", None)):
        c = checks[key]
        assert c.change > c.threshold and c.verdict == "pass" and c.cleared, key
        assert "is no regression" in c.explanation
    assert "rank 1's own stage computes 50% less and the step is not slower (" \
        in checks[("rank_bubble", 1)].explanation
    assert "stages compute less (stage 1 -50%, stage 2 -50%)" in checks[("bubble", None)].explanation
    assert "no stage got heavier" in checks[("imbalance", None)].explanation
    # the imbalance's known answer: stages of 24, 12, 12, 24 ms per step, max / median = 24 / 18
    assert checks[("imbalance", None)].now == pytest.approx(24 / 18, rel=1e-3)
    # the report shows why the rises passed
    text = render_gate_text(result)
    assert "PASS  rank 1 bubble" in text and " got heavier (" not in text
    assert not result.notes


def test_a_bubble_rise_in_a_step_as_long_passes_with_its_cause(tmp, base):
    """The issue's case: rank 1's own stage computes less in a window as long. Stage 1 at
    0.75 leaves the step's critical path (stage 0's and the last stages' work) unchanged."""
    run = snap(tmp, "faster1", dur=dur({1: 0.75}))
    result = gate(run, base, Thresholds(max_rank_bubble_increase=0.02))
    rank1 = by(result)[("rank_bubble", 1)]
    assert rank1.change > 0.02 and rank1.verdict == "pass" and rank1.cleared
    assert "rank 1's own stage computes 25% less" in rank1.explanation
    assert result.exit_code == 0


def test_every_stage_slower_alike_names_the_host_and_the_shape_decides(tmp, base):
    """Every stage 1.5x as long: the pipeline's shape holds (bubble, imbalance, exposed
    communication unchanged), the step is 1.5x as long. The verdict stands on the shape: the
    step-time and stage-compute checks warn, naming the host, not a heavier stage; with
    max_host_slowdown they fail past it."""
    run = snap(tmp, "all_slower", dur=dur(every=1.5))
    result = gate(run, base, Thresholds())
    checks = by(result)
    assert result.verdict == "warn" and result.exit_code == 0
    step = checks[("step_time", None)]
    assert step.verdict == "warn" and step.change == pytest.approx(0.5, rel=0.01)
    assert "every stage slowed alike (+50%) and the pipeline's shape held: the host looks " \
        "slower or busier than the baseline's" in step.explanation
    assert "not counted as a regression (max_host_slowdown gates it)" in step.explanation
    for s in range(P):
        c = checks[("stage_compute", s)]
        assert c.verdict == "warn" and c.change == pytest.approx(0.5, rel=1e-3)
        assert "slowed as every stage did (the host)" in c.explanation
    for key in (("bubble", None), ("imbalance", None), ("exposed_comm", None)):
        assert checks[key].verdict == "pass" and abs(checks[key].change) < 0.005
    assert not [c for c in result.checks if " got heavier" in c.explanation]
    assert result.noisy_line() is None  # the noise did not decide these warnings
    note, = result.notes
    assert note.startswith("every stage computes 1.50x as long as in the baseline and the "
                           "pipeline's shape held")
    assert "the host looks slower or busier than the baseline's" in note
    # a limit for a host's slowdown: past it the checks fail, still naming the host
    strict = gate(run, base, Thresholds(max_host_slowdown=0.2))
    assert strict.exit_code == 1
    assert {(c.metric, c.index) for c in strict.by_verdict("fail")} == \
        {("step_time", None)} | {("stage_compute", s) for s in range(P)}
    assert "past max_host_slowdown +20.0%" in by(strict)[("step_time", None)].explanation
    assert gate(run, base, Thresholds(max_host_slowdown=0.6)).exit_code == 0
    # the other way round: a run on a quieter host passes, and the note says what could hide
    back = gate(base, run, Thresholds())
    assert back.verdict == "pass" and "the host looks faster or quieter" in back.notes[0]


def test_a_slowed_stage_still_fails_and_is_named(tmp, base):
    """Stage 2 1.5x as long: it fails as the stage that got heavier, the ranks that wait on it
    fail for a longer step, and no host is blamed."""
    run = snap(tmp, "slow2", dur=dur({2: 1.5}))
    result = gate(run, base, Thresholds())
    checks = by(result)
    assert result.verdict == "fail" and not result.notes
    stage2 = checks[("stage_compute", 2)]
    assert stage2.verdict == "fail" and stage2.change == pytest.approx(0.5, rel=1e-3)
    assert "stage 2 got heavier" in stage2.explanation
    assert all(checks[("stage_compute", s)].verdict == "pass" for s in (0, 1, 3))
    rank0 = checks[("rank_bubble", 0)]
    assert rank0.verdict == "fail" and not rank0.cleared
    assert "rank 0 waits longer on stage 2, whose compute grew +50%" in rank0.explanation
    assert "from a step" in rank0.explanation and "longer" in rank0.explanation
    assert checks[("step_time", None)].verdict == "fail"


def test_a_baseline_from_before_the_audit_held_its_series_is_read_with_a_note(tmp, base):
    """The audit's per_step is the baseline's series; a baseline written before (no
    audit.per_step) still gates, and the gate says its exposed communication counted waits."""
    import json

    from pipeaudit.gate import baseline_json, read_document

    doc = json.loads(baseline_json(base))
    assert doc["audit"]["per_step"] == doc["series"]
    path = tmp / "baseline.json"
    path.write_text(json.dumps(doc))
    assert gate(base, read_document(path), Thresholds()).notes == []
    del doc["audit"]["per_step"]
    path.write_text(json.dumps(doc))
    old = read_document(path, baseline_only=True)
    assert old.series is not None and old.series.steps == base.series.steps
    result = gate(base, old, Thresholds())
    assert result.verdict == "pass"
    assert result.notes[0].startswith(f"{path} was written by an earlier pipeaudit: its exposed "
                                      "communication counts the time receives wait")


def test_the_per_step_series_is_the_audits_and_the_apis(tmp):
    """One table: the audit's per_step, its analyze JSON, the API's frame and what the gate
    compares are the same numbers (stage 2 at 1.5x: 36 ms of compute per step, the others 24)."""
    run = pipeaudit.load(build_run(tmp, one_f_one_b_orders(P, M), steps=3, name="api",
                                   dur=dur({2: 1.5})).directory)
    s = run.audit().per_step
    assert s.steps == [0, 1, 2] and len(s.step_time_us) == 3
    assert s.stage_total_us(2) == pytest.approx([36_000] * 3, rel=1e-3)
    assert s.stage_total_us(1) == pytest.approx([24_000] * 3, rel=1e-3)
    assert run.audit().to_dict()["per_step"]["imbalance"] == s.imbalance
    frame = run.per_step()
    assert frame["step_time_us"].to_list() == s.step_time_us
    assert frame["stage2_compute_us"].to_list() == s.stage_total_us(2)
    assert frame["rank1_bubble"].to_list() == s.rank_bubble[1]
    assert snapshot_from_run(run).series is s


def test_a_heavier_stage_on_a_quieter_host_still_fails(tmp):
    """Stage 2 30% heavier while every other stage computes 40% less (a quieter host), against
    a baseline whose heaviest stage was stage 1 (33.6 ms): the heaviest stage now (stage 2,
    31.2 ms) is lighter than the baseline's heaviest, and the step is shorter, yet the rises
    that wait on stage 2 are not cleared. The imbalance (33.6 / 24 = 1.4 -> 31.2 / 17.28)
    fails naming stage 2."""
    base = snap(tmp, "base_s1", dur=dur({1: 1.4}))
    run = snap(tmp, "heavy2_quiet", dur=dur({0: 0.6, 1: 0.84, 2: 1.3, 3: 0.6}))
    result = gate(run, base, Thresholds())
    checks = by(result)
    imb = checks[("imbalance", None)]
    assert imb.baseline == pytest.approx(1.4, rel=1e-3)
    assert imb.now == pytest.approx(31.2 / 17.28, rel=1e-3)
    assert imb.verdict == "fail" and not imb.cleared
    assert "stage 2 got heavier (stage 2 compute +30%)" in imb.explanation
    assert checks[("stage_compute", 2)].verdict == "fail"
    assert checks[("step_time", None)].change < 0
    assert not [c for c in result.checks if c.cleared and c.metric != "exposed_comm"]
    assert not [c for c in result.checks if "waits for no one" in c.explanation]
