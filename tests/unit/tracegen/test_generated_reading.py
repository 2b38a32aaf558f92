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

EXAMPLES = int(os.environ.get("TRACEGEN_EXAMPLES", "1000"))
#: filled while the test runs; conftest.py prints it in the terminal summary
TALLY: dict = {"cases": 0, "seconds": 0.0, "verdicts": Counter(), "cannot_tell": Counter()}


def _failure_message(case: Case, problems: list[str]) -> str:
    return (f"generated case read wrong: {case.describe()}\n  " + "\n  ".join(problems) +
            f"\n  write its traces: python3 -m tests.support.tracegen \"{case!r}\" /tmp/tracegen-case")


@pytest.mark.tracegen
@pytest.mark.xfail(strict=False, reason="issue 50: today's reader misreads some generated shapes "
                   "(un-annotated interleaved/looped-BFS v and M, GPipe read as interleaved on GPU, "
                   "zero-kernel actions out of order on GPU, readings over 60 s); remove when fixed")
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck), print_blob=False)
@given(case=cases())
def test_generated_case_reads_to_its_truth(case: Case) -> None:
    t0 = time.perf_counter()
    out = run_case(case)
    TALLY["seconds"] += time.perf_counter() - t0
    TALLY["cases"] += 1
    TALLY["verdicts"][out.verdict] += 1
    if out.verdict == "cannot tell":
        TALLY["cannot_tell"][case.shape()] += 1
    assert out.verdict != "fail", _failure_message(case, out.problems)
