"""pipeaudit.allocator: the CLI asks polars' jemalloc to return freed pages within 50 ms.

The effect is checked for real, in fresh interpreters: 250 MB of small polars tables are
built and dropped, and the memory still resident half a second later is compared with and
without the setting.
"""

from __future__ import annotations

import sys

import pytest

from pipeaudit.allocator import CONF, ENV
from tests.support.child import run_python

_CHILD = """
import os, sys, time
os.environ.pop({env!r}, None)
if sys.argv[1] == "cli":
    from pipeaudit.cli.main import main
    try:
        main(["--version"])
    except SystemExit:
        pass
    print(os.environ.get({env!r}))
    raise SystemExit
if sys.argv[1] == "user":
    os.environ[{env!r}] = "narenas:1"
if sys.argv[1] == "inherited":
    os.environ[{env!r}] = "dirty_decay_ms:500,muzzy_decay_ms:1000"  # written by a parent's polars
if sys.argv[1] == "late":
    import polars
if sys.argv[1] == "one-core":
    os.sched_setaffinity(0, {{min(os.sched_getaffinity(0))}})
    from pipeaudit.allocator import CONF
    print(CONF.split(",")[-1])
    raise SystemExit
from pipeaudit.allocator import CONF, prefer_prompt_release
answer = prefer_prompt_release()
value = os.environ.get({env!r})
print(answer, "ours" if value and CONF in value else "not ours")
""".format(env=ENV)

_EFFECT = """
import os, sys, time
os.environ.pop({env!r}, None)
if sys.argv[1] == "set":
    from pipeaudit.allocator import prefer_prompt_release
    assert prefer_prompt_release()
import polars as pl

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

base = rss()
frames = [pl.DataFrame({{"a": range(i, i + 32768)}}) * 2 for i in range(1000)]  # 256 KB each
held = rss() - base
del frames
time.sleep(0.5)
print(held, rss() - base)
""".format(env=ENV)


@pytest.mark.parametrize("case, expected", [
    ("fresh", "True ours"),
    ("inherited", "True ours"),  # polars' own defaults are no one's choice
    ("user", "False not ours"),  # the user's own configuration is kept
    ("late", "False not ours"),  # polars loaded: too late (polars set its own), nothing changed
    ("cli", CONF),  # the console entry point sets it before any command runs
    ("one-core", "narenas:1"),  # an arena per core this process may run on
])
def test_set_only_before_polars_and_never_over_the_users(case: str, expected: str) -> None:
    out = run_python(_CHILD, case)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == expected


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc; polars uses jemalloc on Linux")
def test_freed_tables_leave_resident_memory() -> None:
    def kept(mode: str) -> tuple[float, float]:
        out = run_python(_EFFECT, mode)
        assert out.returncode == 0, out.stderr
        held, left = map(float, out.stdout.split())
        return held, left

    held, left_default = kept("default")
    if left_default < held / 2:
        pytest.skip("this polars build returns freed memory at once already")
    held, left = kept("set")
    assert held > 150
    assert left < held / 4, (held, left, left_default)


_HEAP = """
import os, sys
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

if sys.argv[1] == "worker":
    from pipeaudit.prestart import init_worker
    init_worker(1)  # what every pool worker runs first
base = rss()
blocks = [b"x" * (6 << 20) for _ in range(3)]  # batch-sized blocks, as a decode frees them
held = rss() - base
del blocks
print(held, rss() - base)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's heap, read from /proc")
def test_pool_workers_keep_freed_batches_in_the_heap() -> None:
    """A pool worker's freed batches stay in its heap for the next ones (no page faults to
    bring them back); a process that did not ask hands them back at once."""
    from pipeaudit.allocator import _glibc

    if _glibc() is None:
        pytest.skip("not glibc")
    results = {}
    for mode in ("plain", "worker"):
        out = run_python(_HEAP, mode)
        assert out.returncode == 0, out.stderr
        results[mode] = tuple(map(float, out.stdout.split()))
    (held, left_plain), (_, left_worker) = results["plain"], results["worker"]
    assert held > 15
    assert left_plain < held / 2, results  # glibc's own thresholds: unmapped when freed
    assert left_worker > held * 0.9, results  # kept (below READ_TRIM_BYTES)
