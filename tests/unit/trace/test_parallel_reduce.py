"""Per-rank decode + reduce in workers: the same audit whatever the executor and jobs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import pipeaudit
from pipeaudit.errors import ConfigError, TraceError
from pipeaudit.trace.executor import Executor, parse_executor
from pipeaudit.trace.load import map_ranks, parse_size
from tests.support.synth import simple_rank, write
from tests.support.paths import SAMPLES
from tests.support.cli import invoke

RUNS = ["1f1b_p4_m8_imb_s1x3", "interleaved-1f1b_p4_m8_v2", "1f1b_p2_m4_noannot", "1f1b_p2_m4_memory"]


def _doc(run, **kw) -> dict:
    return pipeaudit.load(SAMPLES / run, **kw).audit().to_dict()


@pytest.mark.parametrize("run", RUNS)
def test_jobs_1_and_2_same_audit(run: str) -> None:
    one = _doc(run, jobs=1)
    assert one == _doc(run, jobs=2) == _doc(run, executor="processes")
    assert one == _doc(run, jobs=2, max_memory=1000)  # every rank decoded as a stream


def test_timeline_tables_identical_across_executors() -> None:
    a = pipeaudit.load(SAMPLES / "zbv_p2_m4", jobs=1).timeline
    b = pipeaudit.load(SAMPLES / "zbv_p2_m4", jobs=2).timeline
    assert a.inputs == b.inputs and a.warnings == b.warnings
    for ra, rb in zip(a.ranks, b.ranks):
        assert ra.actions.equals(rb.actions) and ra.compute.equals(rb.compute)
        assert all((x == y).all() for x, y in zip(ra.activity, rb.activity))


@pytest.mark.parametrize("kw", [{"jobs": 2}, {"jobs": 2, "executor": "processes"}],
                         ids=["local", "pool"])
def test_errors_keep_their_order(tmp_path: Path, kw: dict) -> None:
    for r in (0, 2):
        write(tmp_path / f"rank{r}.json", simple_rank(r, 4))
    # a set error (missing rank 1) comes before a rank's job error (an --action-pattern whose
    # mb group matches text that is no integer: found only while reducing a rank; a pattern
    # that is no regex at all is refused before any file is read)
    pattern = r"P(?P<mb>P):\d(?P<kind>F)"
    with pytest.raises(TraceError, match="missing ranks 1, 3"):
        pipeaudit.load(tmp_path, action_pattern=pattern, **kw)
    with pytest.raises(ConfigError, match="not an integer"):
        pipeaudit.load(tmp_path, action_pattern=pattern, allow_missing=True, **kw)
    with pytest.raises(ConfigError, match="not a valid regex"):
        pipeaudit.load(tmp_path, action_pattern="(", **kw)
    (tmp_path / "rank3.json").write_text('{"traceEvents": 5}')
    # a file that cannot be decoded comes first of all
    with pytest.raises(TraceError, match="rank3.json: not a trace"):
        pipeaudit.load(tmp_path, action_pattern=pattern, **kw)


def test_map_ranks_returns_small_results_sorted_by_rank(tmp_path: Path) -> None:
    for r in (3, 1, 0, 2):
        write(tmp_path / f"x{r}.json", simple_rank(r, 4))
    res = map_ranks(tmp_path, len_events, jobs=2, columns=["tid"])
    assert [i.rank for i in res.infos] == [0, 1, 2, 3] and res.values == [3, 3, 3, 3]
    assert all(i.start_ns is not None and i.end_ns > i.start_ns for i in res.infos)


def len_events(trace) -> int:
    return trace.events.height


def test_executor_and_size_parsing() -> None:
    assert parse_executor(None) == parse_executor("local") == Executor("local")
    assert parse_executor("dask://10.0.0.5:8786") == Executor("dask", "tcp://10.0.0.5:8786")
    assert str(parse_executor("tcp://h:1")) == "dask://h:1"
    with pytest.raises(ConfigError, match="not one of"):
        parse_executor("ray://x:1")
    assert parse_size("4G") == 4 << 30 and parse_size("512MiB") == 512 << 20 and parse_size("1e9") == 10**9
    for bad in ("x", "0", "-3G"):
        with pytest.raises(ValueError):
            parse_size(bad)


def test_cli_options() -> None:
    run = str(SAMPLES / "1f1b_p2_m4")
    base = invoke("analyze", run, "--format", "json")
    assert base.exit_code == 0
    same = invoke("analyze", run, "--format", "json", "--jobs", "2", "--executor", "processes",
                  "--max-memory", "1M")
    assert same.exit_code == 0 and json.loads(same.output) == json.loads(base.output)
    bad = invoke("analyze", run, "--executor", "nope")
    assert bad.exit_code == 2 and "--executor: 'nope' is not one of" in bad.output
    bad = invoke("analyze", run, "--max-memory", "lots")
    assert bad.exit_code == 2 and "not a memory size" in bad.output


# --------------------------------------------------------------------------- dask


@pytest.mark.slow
def test_dask_executor_against_a_local_cluster() -> None:
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        address = cluster.scheduler_address  # tcp://127.0.0.1:PORT
        url = "dask://" + address.split("://", 1)[1]
        for run in ("1f1b_p4_m8_imb_s1x3", "1f1b_p2_m4_noannot"):
            assert _doc(run, executor=url) == _doc(run, jobs=1)
        from pipeaudit.progress import reporting

        seen: list[tuple[int, int]] = []
        with reporting(lambda done, total: seen.append((done, total))):
            pipeaudit.load(SAMPLES / "1f1b_p4_m8", executor=url)
        assert seen == [(1, 4), (2, 4), (3, 4), (4, 4)]  # as the cluster finishes them
        res = invoke("analyze", str(SAMPLES / "gpipe_p2_m4"), "--format", "json",
                     "--executor", url)
        assert res.exit_code == 0, res.output
        assert json.loads(res.output) == _doc("gpipe_p2_m4")
        # errors raised on a worker arrive as the same one-line errors
        with pytest.raises(TraceError, match="no such file"):
            map_ranks([str(SAMPLES / "gpipe_p2_m4" / "rank0.json.gz"), "/nonexistent/rank1.json"],
                      executor=url)


def test_prestart_only_when_the_pool_will_be_used() -> None:
    from pipeaudit.prestart import PRELOAD, maybe_prestart
    from pipeaudit.trace import executor

    small = [str(SAMPLES / "1f1b_p2_m4")]
    assert not maybe_prestart(small, None, "local")  # a few MB: decoded in-process
    assert not maybe_prestart(small, 1, "local")
    assert not maybe_prestart(small, None, "dask://h:1")
    assert executor.PRELOAD == PRELOAD
    assert maybe_prestart(small, 2, "local")  # --jobs 2 always uses the pool
    assert _doc("1f1b_p2_m4", jobs=2) == _doc("1f1b_p2_m4", jobs=1)  # the pool runs on it


def test_one_worker_is_spawned_more_fork_from_a_server() -> None:
    """One pool worker (2 jobs) is spawned: no forkserver left holding a copy of the imports;
    more fork from a preloaded forkserver (one import for all)."""
    import multiprocessing

    from pipeaudit.prestart import start_method

    assert start_method(1) == "spawn"
    if "forkserver" in multiprocessing.get_all_start_methods():
        assert start_method(2) == start_method(7) == "forkserver"


def test_a_prestarted_pool_is_taken_only_when_it_fits() -> None:
    from pipeaudit import prestart

    small = [str(SAMPLES / "1f1b_p2_m4")]
    assert prestart.maybe_prestart(small, 2, "local")
    threads = max(1, prestart.cores() // 2)
    pool = prestart.take_pool(2, threads)  # a worker per job
    assert pool is not None and prestart.take_pool(2, threads) is None  # taken once
    with pool:
        assert pool.submit(abs, -3).result(timeout=60) == 3
    assert prestart.maybe_prestart(small, 2, "local")
    assert prestart.take_pool(3, threads) is None  # not the pool asked for: shut down


def test_a_dead_worker_names_the_script_guard_when_run_from_a_script(tmp_path):
    """From a script, a dead pool worker may be the script re-imported by the worker: the
    message says how to guard it; from ``python -c`` (no script) it does not."""
    import subprocess
    import sys

    code = "from pipeaudit.trace.executor import _died_message; print(_died_message())"
    script = tmp_path / "analysis.py"
    script.write_text(code + "\n")
    from_script = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                                 check=True).stdout
    inline = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True).stdout
    assert 'if __name__ == "__main__":' in from_script and "jobs=1" in from_script
    assert "script" not in inline and "out of memory" in inline


def _pid_after(item: tuple[int, int, float, bool]) -> tuple[int, int]:
    """(pid, the item's index) after sleeping; a worker (not the caller) may die on purpose.
    Module level: the pool pickles it by reference."""
    import os
    import time

    index, caller, sleep, die_in_worker = item
    time.sleep(sleep)
    if die_in_worker and os.getpid() != caller:
        os._exit(1)
    return os.getpid(), index


def test_run_pool_this_process_works_while_the_pool_starts_and_order_is_kept() -> None:
    import os

    from pipeaudit.trace.executor import run_pool

    out = run_pool(_pid_after, [(i, os.getpid(), 0.2, False) for i in range(30)], workers=2)
    assert [index for _, index in out] == list(range(30))
    pids = [p for p, _ in out]
    # the caller took items while the two workers started (the first of all: the one a CLI
    # reads ahead), then left the rest to them
    assert pids[0] == os.getpid() and len(set(pids)) == 3, pids
    assert pids.count(os.getpid()) < len(pids) // 2, pids


def test_run_pool_dead_worker_is_one_trace_error() -> None:
    import os

    from pipeaudit.trace.executor import run_pool

    with pytest.raises(TraceError, match="worker process died"):
        run_pool(_pid_after, [(i, os.getpid(), 0.3, True) for i in range(4)], workers=2)
