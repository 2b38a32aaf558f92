"""How many workers the local pool gets (pipeaudit.trace.pool.workers_and_pool)."""

from __future__ import annotations

import pytest

from pipeaudit.trace import pool

BIG = 10**9  # JSON bytes: the pool pays


@pytest.mark.parametrize(("cores", "files", "jobs", "expected"), [
    (2, 4, None, (3, True)),     # up to 2 files per core: a process per file (this one + 3)
    (2, 5, None, (2, True)),     # more: a worker per core
    (2, 3, None, (2, True)),
    (2, 2, None, (2, True)),     # no more files than cores: as before
    (8, 16, None, (15, True)),
    (8, 17, None, (8, True)),
    (16, 20, None, (16, True)),  # at most 16 files get a process each
    (1, 4, None, (1, False)),    # one core: no pool
    (2, 4, 2, (2, True)),        # --jobs is what the user asked for
    (2, 4, 4, (4, True)),
])
def test_workers(monkeypatch, cores, files, jobs, expected):
    monkeypatch.setattr(pool, "cores", lambda: cores)
    assert pool.workers_and_pool(files, jobs, BIG) == expected


def test_small_inputs_stay_in_this_process(monkeypatch):
    monkeypatch.setattr(pool, "cores", lambda: 2)
    workers, use = pool.workers_and_pool(4, None, pool.POOL_MIN_JSON_BYTES - 1)
    assert (workers, use) == (3, False)  # below the pool's threshold: read here


@pytest.mark.parametrize(("cores", "files", "jobs", "json_bytes", "expected"), [
    (2, 4, None, BIG, 2),     # files the pool would read: a thread per core
    (2, 2, None, BIG, 2),
    (8, 3, None, BIG, 3),     # at most one per file
    (2, 4, 2, BIG, 0),        # --jobs: the pool the user asked for
    (2, 17, None, BIG, 0),    # more than THREADS_MAX_FILES: the pool
    (2, 4, None, 1000, 0),    # small: read one after the other here, as before
    (1, 4, None, BIG, 0),     # one core: no pool, no threads
    (2, 1, None, BIG, 0),
])
def test_threads(monkeypatch, cores, files, jobs, json_bytes, expected):
    monkeypatch.setattr(pool, "cores", lambda: cores)
    assert pool.use_threads(files, jobs, json_bytes) == expected
    assert pool.use_threads(files, jobs, json_bytes, processes=True) == 0


def test_no_threads_without_the_scanner(monkeypatch):
    monkeypatch.setattr(pool, "cores", lambda: 2)
    monkeypatch.setenv("PIPEAUDIT_NO_SCANNER", "1")  # msgspec holds the GIL: threads would wait
    assert pool.use_threads(4, None, BIG) == 0
