"""Generated pipeline traces with known truth, read by pipeaudit.load (issue 50).

Every dimension is drawn independently (tests/support/tracegen/strategies.py); hypothesis runs
a fixed, derandomized set of cases and shrinks a failure to the smallest trace that shows it.
Run it alone: ``python3 -m pytest -q tests/unit/tracegen -p no:cacheprovider``; set
``TRACEGEN_EXAMPLES`` for more or fewer cases. The count, the seconds and the cannot-tell
shapes print in pytest's terminal summary. benchmarks/generated_reading.py runs a long search.
"""

from __future__ import annotations

import os
import time
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings

from tests.support.tracegen import Case
from tests.support.tracegen.check import run_case
from tests.support.tracegen.strategies import cases

#: cases of each test held to the truth (CI: a few minutes in all on two cores; the reader takes
#: 0.1-1 s a case there); the whole space's test and the multi-stage one take EXAMPLES // 2
EXAMPLES = int(os.environ.get("TRACEGEN_EXAMPLES", "120"))
#: filled while the tests run; tests/support/tracegen/pytest_tally.py prints it in the summary
TALLY: dict = {"cases": 0, "seconds": 0.0, "verdicts": Counter(), "cannot_tell": Counter()}
#: subspaces held apart, so that a failure names its part of the space: one stage per rank over
#: gloo (every grid, spans or none), and the multi-stage schedules with their spans over gloo
HELD = {
    "one stage per rank": dict(schedules=("gpipe", "1f1b"), p2p=("gloo",)),
    "multi-stage, spans": dict(schedules=("interleaved-1f1b", "looped-bfs", "interleaved-zb",
                                          "zbv", "dualpipev"), annotated=(True,), p2p=("gloo",)),
}


def _check(case: Case) -> None:
    t0 = time.perf_counter()
    out = run_case(case)
    TALLY["seconds"] += time.perf_counter() - t0
    TALLY["cases"] += 1
    TALLY["verdicts"][out.verdict] += 1
    if out.verdict == "cannot tell":
        TALLY["cannot_tell"][case.shape()] += 1
    assert out.verdict != "fail", _failure_message(case, out.problems)


def _failure_message(case: Case, problems: list[str]) -> str:
    return (f"generated case read wrong: {case.describe()}\n  " + "\n  ".join(problems) +
            f"\n  write its traces: python3 -m tests.support.tracegen \"{case!r}\" /tmp/tracegen-case")


@pytest.mark.tracegen
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck), print_blob=False)
@given(case=cases(**HELD["one stage per rank"]))
def test_one_stage_per_rank_reads_to_its_truth(case: Case) -> None:
    _check(case)


@pytest.mark.tracegen
@settings(max_examples=EXAMPLES // 2, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck), print_blob=False)
@given(case=cases(**HELD["multi-stage, spans"]))
def test_multi_stage_schedules_with_their_spans_read_to_their_truth(case: Case) -> None:
    _check(case)


@pytest.mark.tracegen
@settings(max_examples=max(EXAMPLES // 2, 1), deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck), print_blob=False)
@given(case=cases())
def test_generated_case_reads_to_its_truth(case: Case) -> None:
    _check(case)
