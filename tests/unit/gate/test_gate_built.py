"""Gate decisions on built runs whose per-step durations are known exactly."""

from __future__ import annotations

import copy
import math

import pytest

import pipeaudit
from tests.support.builders import build_run, gpipe_orders, one_f_one_b_orders
from pipeaudit.errors import ConfigError
from pipeaudit.gate import Thresholds, gate, snapshot_from_run
from pipeaudit.gate.stats import MAD_SCALE
from pipeaudit.report.gate_text import render_gate_text

P, M = 4, 8


def base_dur(s, k, m):
    return 1000 if k == "F" else 2000


def snap(built):
    return snapshot_from_run(pipeaudit.load(built.directory))


def slow_stage(stage, steps, factor=3):
    """step_dur making ``stage`` ``factor`` times slower in ``steps``."""
    return lambda st, s, k, m: base_dur(s, k, m) * (factor if s == stage and st in steps else 1)


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    return tmp_path_factory.mktemp("built_gate")


@pytest.fixture(scope="module")
def baseline5(tmp):
    return snap(build_run(tmp, one_f_one_b_orders(P, M), steps=5, latency=50, name="base5"))


def fails(result):
    return {(c.metric, c.index) for c in result.by_verdict("fail")}


def test_one_slow_step_does_not_fail(tmp, baseline5):
    built = build_run(tmp, one_f_one_b_orders(P, M), steps=5, latency=50, name="one_slow",
                      step_dur=slow_stage(1, {2}))
    run = snap(built)
    result = gate(run, baseline5, Thresholds())
    assert result.verdict == "pass", [c.explanation for c in result.checks if c.verdict != "pass"]
    # the slow step is really there: a mean over steps would have failed the step-time check
    times = run.series.step_time_us
    assert max(times) > 1.5 * min(times)
    mean_change = sum(times) / len(times) / (sum(baseline5.series.step_time_us) / 5) - 1
    assert mean_change > Thresholds().max_step_time_increase


def test_all_steps_slow_fails_and_names_the_stage(tmp, baseline5):
    built = build_run(tmp, one_f_one_b_orders(P, M), steps=5, latency=50, name="all_slow",
                      step_dur=slow_stage(1, set(range(5))))
    result = gate(snap(built), baseline5, Thresholds())
    assert result.verdict == "fail" and result.exit_code == 1
    assert ("stage_compute", 1) in fails(result)
    assert not {("stage_compute", s) for s in (0, 2, 3)} & fails(result)
    stage = next(c for c in result.checks if c.metric == "stage_compute" and c.index == 1)
    assert stage.change == pytest.approx(2.0, rel=0.01)  # 3x heavier: +200%
    assert stage.explanation.startswith("stage 1 compute per step +200.")
    assert "(F +200%, B +200%): stage 1 got heavier" in stage.explanation
    bubble = next(c for c in result.checks if c.metric == "bubble")
    assert bubble.verdict == "fail" and "stage 1 got heavier" in bubble.explanation
    rank0 = next(c for c in result.checks if c.metric == "rank_bubble" and c.index == 0)
    assert "waits longer on stage 1" in rank0.explanation


def test_heavier_stage_single_step_dur_function(tmp):
    base = snap(build_run(tmp, one_f_one_b_orders(P, M), steps=3, name="uniform3"))
    heavy = snap(build_run(tmp, one_f_one_b_orders(P, M), steps=3, name="heavy3",
                           dur=lambda s, k, m: base_dur(s, k, m) * (2 if s == 2 else 1)))
    result = gate(heavy, base, Thresholds())
    assert [c.index for c in result.by_verdict("fail") if c.scope == "stage"] == [2]
    imb = next(c for c in result.checks if c.metric == "imbalance")
    assert imb.now == pytest.approx(2.0, rel=0.01) and imb.verdict == "fail"
    assert "stage 2 is the heaviest" in imb.explanation
    budget = gate(heavy, None, Thresholds(max_imbalance=1.5, max_rank_bubble=0.3))
    failed = {(c.metric, c.index): c.explanation for c in budget.by_verdict("fail")}
    assert "stage 2 is the heaviest stage" in failed[("imbalance", None)]
    assert "rank 0 waits on stage 2" in failed[("rank_bubble", 0)]
    assert ("rank_bubble", 2) not in failed  # the heavy stage's own rank is busy


def test_change_within_baseline_noise_warns(tmp):
    factors = [1.0, 1.1, 1.2, 1.3, 1.4]
    noisy = snap(build_run(
        tmp, one_f_one_b_orders(P, M), steps=5, name="noisy",
        step_dur=lambda st, s, k, m: int(base_dur(s, k, m) * (factors[st] if s == 1 else 1))))
    run = snap(build_run(
        tmp, one_f_one_b_orders(P, M), steps=5, name="noisy_run",
        step_dur=lambda st, s, k, m: int(base_dur(s, k, m) * (1.5 if s == 1 else 1))))
    result = gate(run, noisy, Thresholds())
    stage1 = next(c for c in result.checks if c.metric == "stage_compute" and c.index == 1)
    # median factor 1.2, MAD 0.1: the steps vary by 1.4826 x 0.1 / 1.2 of the median; the
    # noise band is 3 standard errors of the change of two medians of 5 steps each,
    # 3 x sqrt(pi/2) x that x sqrt(1/5 + 1/5)
    per_step = MAD_SCALE * 0.1 / 1.2
    assert stage1.noise == pytest.approx(3 * math.sqrt(math.pi / 2) * per_step * math.sqrt(0.4),
                                         rel=2e-3)
    assert stage1.change == pytest.approx(0.25, rel=2e-3)
    assert stage1.verdict == "warn" and "within the noise of the medians" in stage1.explanation
    assert result.verdict == "warn" and result.exit_code == 0
    # the band (29.4%) is wider than the threshold (15%): n steps each side narrow it to
    # 3 sqrt(pi/2) per_step sqrt(2/n) <= 15%, n >= 2 (3 sqrt(pi/2) per_step / 0.15)^2 = 19.2
    assert stage1.too_noisy and stage1.steps_needed == 20
    wide = [c for c in result.checks if c.too_noisy]
    need = max(c.steps_needed for c in wide)
    assert need >= 20
    assert result.noisy_line() == (
        f"the baseline is too noisy to gate {len(wide)} checks at the threshold (its noise band "
        f"is wider): {', '.join(c.name for c in wide[:4])} and {len(wide) - 4} more; a baseline "
        f"and a run of {need} steps each would gate them (profile --steps {need})")
    text = render_gate_text(result)  # the report opens with it (wrapped to the report's width)
    assert text.startswith("pipeaudit: the baseline is too noisy")
    assert " ".join(text.split()).startswith(f"pipeaudit: {result.noisy_line()}")
    # without noise handling the same change fails
    strict = gate(run, noisy, Thresholds(noise_k=0))
    assert ("stage_compute", 1) in fails(strict) and strict.exit_code == 1


def test_latency_shows_as_exposed_communication(tmp):
    base = snap(build_run(tmp, one_f_one_b_orders(P, M), steps=3, name="nolat"))
    slow = snap(build_run(tmp, one_f_one_b_orders(P, M), steps=3, latency=600, name="lat600"))
    result = gate(slow, base, Thresholds())
    assert {"exposed_comm", "bubble", "step_time"} <= {m for m, _ in fails(result)}
    assert not [c for c in result.by_verdict("fail") if c.metric == "stage_compute"]
    bubble = next(c for c in result.checks if c.metric == "bubble")
    assert "+0.0 pts from uneven stages" in bubble.explanation
    assert "from communication, waits and host overhead" in bubble.explanation


def test_schedule_change_refused_then_inflight_regression(tmp):
    one = snap(build_run(tmp, one_f_one_b_orders(P, M), steps=1, name="o1f1b"))
    gp = snap(build_run(tmp, gpipe_orders(P, M), steps=1, name="ogpipe"))
    with pytest.raises(ConfigError, match=r"schedule 1f1b -> gpipe.*--allow-config-change"):
        gate(gp, one, Thresholds())
    result = gate(gp, one, Thresholds(), allow_config_change=True)
    inflight = {c.index: c for c in result.checks if c.metric == "peak_inflight"}
    assert {s: (c.baseline, c.now) for s, c in inflight.items()} == \
        {s: (P - s, M) for s in range(P)}
    assert all(c.verdict == "fail" for c in inflight.values())
    assert "stage 0 holds the activations of 4 more microbatch(es)" in inflight[0].explanation


def test_memory_regression_names_the_rank(tmp):
    base = snap(build_run(tmp, one_f_one_b_orders(P, M), steps=3, memory=True, name="mem"))
    assert sorted(base.series.rank_peak_memory) == list(range(P))
    assert gate(base, base, Thresholds()).verdict == "pass"
    grown = copy.deepcopy(base)
    grown.series.rank_peak_memory[2] = [int(v * 1.3) for v in grown.series.rank_peak_memory[2]]
    result = gate(grown, base, Thresholds())
    assert fails(result) == {("peak_memory", 2)}
    c = result.by_verdict("fail")[0]
    assert c.change == pytest.approx(0.3, rel=1e-3) and c.explanation.startswith("rank 2 peak memory")


def test_budgets_on_exact_bubble(tmp):
    run = snap(build_run(tmp, gpipe_orders(P, M), steps=2, name="gp_budget"))
    truth = (P - 1) / (M + P - 1)
    result = gate(run, None, Thresholds(max_bubble=0.25, max_bubble_over_theory=0.01))
    by = {c.metric: c for c in result.checks}
    assert by["bubble"].now == pytest.approx(truth, abs=0.005) and by["bubble"].verdict == "fail"
    assert by["bubble_over_theory"].verdict == "pass"
    assert abs(by["bubble_over_theory"].now) < 0.005
    assert gate(run, None, Thresholds(max_bubble=0.3)).verdict == "pass"
    with pytest.raises(ConfigError, match="nothing to check"):
        gate(run, None, Thresholds())


def test_gate_and_diff_read_the_same_medians(tmp, baseline5):
    """A run of 5 steps with stage 1 three times slower in one step: the median over steps is
    the other steps' figure (known: 8 F of 1 ms and 8 B of 2 ms = 24 ms per step), the mean
    would count the slow step (24 x 7/5). gate and diff report the same numbers."""
    from pipeaudit.gate import diff_runs

    run = snap(build_run(tmp, one_f_one_b_orders(P, M), steps=5, latency=50, name="slow_once",
                         step_dur=slow_stage(1, {2})))
    g = gate(run, baseline5, Thresholds())
    d = diff_runs(baseline5, run)
    assert d.notes == []
    stage = {s.stage: s for s in d.stages}
    for c in g.checks:
        if c.metric == "stage_compute":
            assert (stage[c.index].a.total_us, stage[c.index].b.total_us) == (c.baseline, c.now)
    assert stage[1].b.total_us == pytest.approx(24_000, rel=1e-3)  # not the mean, 33,600
    assert stage[1].b.compute_us == pytest.approx({"F": 8_000, "B": 16_000}, rel=1e-3)
    rows = {r.metric: r for r in d.pipeline}
    check = {c.metric: c for c in g.checks if c.scope == "pipeline"}
    assert (rows["bubble (measured)"].a, rows["bubble (measured)"].b) == \
        (check["bubble"].baseline, check["bubble"].now)
    assert (rows["stage imbalance (max/median)"].a, rows["stage imbalance (max/median)"].b) == \
        (check["imbalance"].baseline, check["imbalance"].now)
    assert (rows["median step time"].a, rows["median step time"].b) == \
        pytest.approx((check["step_time"].baseline, check["step_time"].now))
