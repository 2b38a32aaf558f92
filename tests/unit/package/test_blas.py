"""pipeaudit.blas: the CLI's trace-reading commands hold numpy's OpenBLAS to one thread.

Checked in fresh interpreters (the environment variable acts only before numpy loads)."""

from __future__ import annotations

import os

import pytest

from pipeaudit.blas import ENV
from tests.support.child import run_python

_CHILD = """
import os, sys
for var in ({env!r}, "GOTO_NUM_THREADS", "OMP_NUM_THREADS"):  # OpenBLAS's own default
    os.environ.pop(var, None)
if sys.argv[1] == "user":
    os.environ[{env!r}] = "3"
if sys.argv[1] in ("cli", "user"):
    from pipeaudit.cli.main import main
    try:
        main(["analyze", "sample_traces/1f1b_p2_m4", "--format", "json", "-o", os.devnull,
              "--force", "--jobs", "1"])
    except SystemExit as exc:
        assert not exc.code, exc.code
    print(os.environ.get({env!r}))
    raise SystemExit
if sys.argv[1] == "one":
    from pipeaudit.blas import one_blas_thread
    assert one_blas_thread()
before = len(os.listdir("/proc/self/task"))
import numpy
print(len(os.listdir("/proc/self/task")) - before)
""".format(env=ENV)


@pytest.mark.parametrize("case, expected", [("cli", "1"), ("user", "3")])
def test_analyze_sets_one_blas_thread_unless_the_user_chose(case: str, expected: str) -> None:
    out = run_python(_CHILD, case)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == expected


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc")
def test_one_blas_thread_starts_no_thread_with_numpy() -> None:
    extra = {case: int(run_python(_CHILD, case).stdout.split()[-1]) for case in ("default", "one")}
    if extra["default"] == 0:
        pytest.skip("numpy's BLAS starts no thread here (one core, or not OpenBLAS)")
    assert extra["one"] == 0
