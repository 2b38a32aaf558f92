"""compare(): the verdict on an un-annotated reading, on readings of a bundled real run."""

from __future__ import annotations

import dataclasses

import pytest

import pipeaudit
from pipeaudit.conformance.compare import (BUBBLE_TOL, COMPUTE_TOL, FORWARDS, LAST_STAGE,
                                           NOWHERE, Truth, compare, same_order)
from tests.support.paths import SAMPLES
from tests.support.tracegen import Case, generate

RUN = SAMPLES / "1f1b_p2_m4"


@pytest.fixture(scope="module")
def reading():
    run = pipeaudit.load(str(RUN))
    return run.audit(), run.actions()


def test_a_reading_equal_to_its_twin_passes(reading):
    result, actions = reading
    truth = Truth("1f1b", 2, 1, 4, result.num_steps, 1, (0, 1))
    verdict = compare(truth, result, actions, result, actions)
    assert verdict.ok, verdict.problems
    assert verdict.max_bubble_diff == 0 and verdict.max_compute_diff == 0
    assert verdict.other_ops == (0, actions.height)


def test_an_action_given_other_ops_is_counted_however_little_they_weigh(reading):
    """One action with 2 µs more compute (a detach read as its own): within every
    tolerance, yet counted, as it would be on every run."""
    result, actions = reading
    truth = Truth("1f1b", 2, 1, 4, result.num_steps, 1, (0, 1))
    first = (actions["rank"] == 0) & (actions["kind"] == "F") & (actions["microbatch"] == 0) \
        & (actions["step"] == actions["step"].min())
    bare = actions.with_columns(compute_us=actions["compute_us"] + first.cast(float) * 2.0)
    verdict = compare(truth, result, actions, result, bare)
    assert verdict.ok, verdict.problems
    assert verdict.other_ops == (1, actions.height)
    exact = compare(dataclasses.replace(truth, other_ops_allowed=NOWHERE), result, actions,
                    result, bare)
    assert exact.problems == [f"1 of {actions.height} actions hold other ops than the twin's "
                              "(first: rank 0 step 0 stage 0 F0)"]
    forwards = dataclasses.replace(truth, other_ops_allowed=FORWARDS)
    assert compare(forwards, result, actions, result, bare).ok
    last = dataclasses.replace(truth, other_ops_allowed=LAST_STAGE)
    assert compare(last, result, actions, result, bare).problems[0].startswith(
        f"1 of {actions.height} actions outside the last stage hold other ops")


def test_each_kind_of_difference_is_named(reading):
    result, actions = reading
    truth = Truth("gpipe", 2, 1, 8, result.num_steps, 1, (0, 1))
    off = dataclasses.replace(result, ranks=[dataclasses.replace(r, bubble=r.bubble + 2 * BUBBLE_TOL)
                                             for r in result.ranks])
    slower = actions.with_columns(compute_us=actions["compute_us"] * 1.06)
    problems = compare(truth, result, actions, off, slower).problems
    text = "\n".join(problems)
    assert "schedule read as '1f1b', is 'gpipe'" in text and "M read as 4, is 8" in text
    assert sum("bubble" in p for p in problems) == 2
    assert "median compute difference" in text and "+6.0%" in text


def test_one_action_descheduled_far_off_moves_no_median_of_differences(reading):
    """A noisy run: the twin's forwards differ by a millisecond each, and the bare reading gives
    the shortest a 4 ms descheduled op (an allowed one, DeepSpeed's loss division) and every
    one 20 µs: the medians of the two readings lie far apart, the median of the differences
    does not."""
    result, actions = reading
    truth = Truth("1f1b", 2, 1, 4, result.num_steps, 1, (0, 1))
    forwards = (actions["rank"] == 1) & (actions["kind"] == "F")
    order = forwards.cast(int).cum_sum() * forwards.cast(int)  # 1, 2, ... on rank 1's forwards
    noisy = actions.with_columns(compute_us=actions["compute_us"] + order * 1000.0)
    bare = noisy.with_columns(compute_us=noisy["compute_us"] + forwards.cast(float) * 20.0
                              + (order == 1).cast(float) * 4000.0)
    twin_f, bare_f = (a.filter(forwards)["compute_us"].median() for a in (noisy, bare))
    assert bare_f / twin_f - 1 > COMPUTE_TOL  # the medians alone would call it misread
    verdict = compare(truth, result, noisy, result, bare)
    assert not [p for p in verdict.problems if "median compute" in p], verdict.problems
    every = noisy.with_columns(compute_us=noisy["compute_us"] * (1 + 0.2 * forwards.cast(float)))
    assert any(p.startswith("rank 1 stage 1 F: median compute difference")
               for p in compare(truth, result, noisy, result, every).problems)


def test_schedules_that_run_one_order_are_one_truth():
    at_m1 = Truth("1f1b", 2, 1, 1, 2, 1, (0, 1))
    assert same_order("naive", at_m1) and same_order("gpipe", at_m1)
    at_m4 = dataclasses.replace(at_m1, M=4)
    assert not same_order("naive", at_m4)
    last_stage_only = dataclasses.replace(at_m4, ranks=(1,), positions=(1,))
    assert same_order("naive", last_stage_only) and not same_order("gpipe", last_stage_only)


#: A generated ZBV run whose reading from the ops cannot tell (docs/conformance.md): three
#: layers of distinct ops per stage and nothing between the two stages' backwards at the V's
#: turn (torch detaches the handed-over gradient there; this run does not).
CANNOT_TELL = Case(schedule="zbv", pp=3, v=2, m=7, steps=1, profiler_steps=True, batched=True,
                   optimizer=False, batch_split=False, op_shape="distinct", layers=3, nested=True,
                   loss=False, heavy_stage=5, heavy_chunk=1, heavy_factor=1.5, latency_us=5.0,
                   named_groups=False, state_steps=True, state_microbatches=True, seed=505913792)


def test_a_reading_that_cannot_tell_passes_only_where_the_cell_allows_it(tmp_path):
    """A V-shaped run read from its ops, READING_UNCERTAIN (no schedule, no M), held to the
    same run with its spans."""
    g_bare = generate(CANNOT_TELL)
    g_twin = generate(dataclasses.replace(CANNOT_TELL, annotated=True))
    bare_dir, twin_dir = tmp_path / "bare", tmp_path / "twin"
    g_bare.write(str(bare_dir))
    g_twin.write(str(twin_dir))
    twin_run, bare_run = pipeaudit.load(str(twin_dir)), pipeaudit.load(str(bare_dir))
    twin, bare = twin_run.audit(), bare_run.audit()
    assert twin.schedule == "zbv" and not twin.uncertain
    assert bare.uncertain and bare.schedule is None and bare.num_microbatches is None
    truth = Truth("zbv", 3, 2, 7, twin.num_steps, 1, (0, 1, 2))
    strict = compare(truth, twin, twin_run.actions(), bare, bare_run.actions())
    assert strict.uncertain and strict.problems[0].startswith("reading uncertain: rank ")
    allowed = compare(dataclasses.replace(truth, may_be_uncertain=True), twin, twin_run.actions(),
                      bare, bare_run.actions())
    assert allowed.ok and allowed.uncertain, allowed.problems
    claims = dataclasses.replace(bare, num_microbatches=28)
    assert "claims schedule" in compare(dataclasses.replace(truth, may_be_uncertain=True), twin,
                                        twin_run.actions(), claims, bare_run.actions()).problems[0]


def test_a_host_descheduled_in_an_allowed_op_moves_the_bubble_by_that_op_and_no_more(reading):
    """A Megatron-like forward holding the schedule's bookkeeping op, descheduled for 4 ms in
    one step: the bubble may move by 4 ms over that step's window (averaged over the steps)."""
    result, actions = reading
    truth = Truth("1f1b", 2, 1, 4, result.num_steps, 1, (0, 1), other_ops_allowed=FORWARDS)
    step = actions["step"].min()
    first = (actions["rank"] == 0) & (actions["kind"] == "F") & (actions["microbatch"] == 0) \
        & (actions["step"] == step)
    bare_actions = actions.with_columns(compute_us=actions["compute_us"] + first.cast(float) * 4000.0)
    window = next(s.step_time_us for s in result.steps if s.step == step)
    moved = 4000.0 / window / len(result.steps)
    within = dataclasses.replace(result, ranks=[dataclasses.replace(r, bubble=r.bubble - 0.9 * moved - 0.004)
                                                for r in result.ranks])
    assert compare(truth, result, actions, within, bare_actions).ok
    beyond = dataclasses.replace(result, ranks=[dataclasses.replace(r, bubble=r.bubble - 1.1 * moved - 0.006)
                                                for r in result.ranks])
    assert not compare(truth, result, actions, beyond, bare_actions).ok
    exact = dataclasses.replace(truth, other_ops_allowed=NOWHERE)  # torch: no slack at all
    assert not compare(exact, result, actions, within, bare_actions).ok
