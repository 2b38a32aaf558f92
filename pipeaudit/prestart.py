"""What a command starts before its own imports: the local worker pool, and the read of its
first rank (:func:`start_early`).

The local pool (:mod:`pipeaudit.trace.pool`) needs its workers to import polars, numpy,
msgspec and pipeaudit (about 0.5-0.7 s). Started at the top of a command
(:func:`maybe_prestart`), that import runs on another core while the command imports the same
modules itself, instead of after it (the first task, which waits for it, is submitted from a
thread); ``run_pool`` then takes the started pool (:func:`pipeaudit.trace.pool.take_pool`).
:func:`start_early` also starts reading the rank this process decodes first
(:mod:`pipeaudit.trace.readahead`). This module imports nothing heavy (not even
multiprocessing until a pool starts), and starts the pool only when the run will use it
(:func:`pipeaudit.trace.pool.workers_and_pool`, which :func:`pipeaudit.trace.load.use_pool`
asks again later). The pool itself is :mod:`pipeaudit.trace.pool`'s: this module only starts
it early, so that the trace layer never imports the CLI's start-up.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipeaudit.allocator import cores  # noqa: F401 (API: the cores a pool shares)
from pipeaudit.trace.pool import (  # noqa: F401 (API)
    HELP_MAX_ITEMS, POOL_MIN_JSON_BYTES, PRELOAD, hand_over, init_worker, new_pool, pool_shape,
    start_method, take_pool, use_threads, workers_and_pool,
)

if TYPE_CHECKING:  # pragma: no cover
    from concurrent.futures import ProcessPoolExecutor

_SUFFIXES = (".json", ".json.gz", ".json.gzip")

def _guess(paths: Sequence[str]) -> list[tuple[str, int]]:
    """(file, JSON bytes) of the trace-named regular files in ``paths`` (files or
    directories, one level); gzip counted by the size its trailer records. Nothing else is
    opened: a FIFO named like a trace would block the open (discovery refuses or skips it
    later)."""
    found: list[tuple[str, int]] = []
    for p in paths:
        try:
            if os.path.isdir(p):
                entries = [e.path for e in os.scandir(p) if e.name.endswith(_SUFFIXES)
                           and e.name != "manifest.json"]
            else:
                entries = [p]
            for f in entries:
                n = _json_bytes(f)
                if n is not None:
                    found.append((f, n))
        except OSError:
            continue
    return found


def _json_bytes(path: str) -> int | None:
    """The JSON size of a regular file (None for anything else), opened without blocking."""
    if not stat.S_ISREG(os.stat(path).st_mode):
        return None
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            return None  # replaced since the stat
        n = os.fstat(fh.fileno()).st_size
        if fh.read(2) == b"\x1f\x8b" and n >= 18:
            fh.seek(-4, os.SEEK_END)
            n = max(n, int.from_bytes(fh.read(4), "little"))
    return n


@dataclass(frozen=True)
class Plan:
    """How a local run of some files will go, guessed before anything heavy is imported
    (:func:`pipeaudit.trace.pool.workers_and_pool`, which :func:`pipeaudit.trace.load.use_pool`
    asks again later)."""

    files: list[tuple[str, int]]  # (trace file, JSON bytes)
    workers: int
    pool: bool  # the local pool: else every rank is read in this process
    threads: int = 0  # threads of this process read the ranks (pipeaudit.trace.pool.use_threads)


def plan(paths: Sequence[str], jobs: int | None, executor: str | None) -> Plan | None:
    """The :class:`Plan` of reading ``paths`` here; None for a cluster executor."""
    if executor not in (None, "local", "processes"):
        return None
    files = _guess(paths)
    json_bytes = sum(n for _, n in files)
    workers, pool = workers_and_pool(len(files), jobs, json_bytes, processes=executor == "processes")
    threads = use_threads(len(files), jobs, json_bytes, executor == "processes")
    if threads:
        return Plan(files, threads, False, threads)
    return Plan(files, max(1, workers), pool)


def maybe_prestart(paths: Sequence[str], jobs: int | None, executor: str | None) -> bool:
    """Start the worker pool now if the analysis of ``paths`` will use the local pool."""
    p = plan(paths, jobs, executor)
    return p is not None and _prestart(p)


def start_early(paths: Sequence[str], jobs: int | None, executor: str | None,
                max_memory: int | str | None, salvage: bool) -> None:
    """What a command that reads and reduces every rank starts before its own imports: the
    local pool (:func:`maybe_prestart`) and the read of the file this process decodes first
    (:mod:`pipeaudit.trace.readahead`)."""
    p = plan(paths, jobs, executor)
    if p is None:
        return
    _read_ahead(p, max_memory, salvage)  # first: the pool's start imports multiprocessing
    if p.pool:
        _prestart(p)


def _read_ahead(p: Plan, max_memory: int | str | None, salvage: bool) -> None:
    """Start reading the file this process decodes first, when it decodes one."""
    if salvage or not p.files or (p.pool and len(p.files) > HELP_MAX_ITEMS):
        return  # salvage reads damaged files another way; else only the pool reads
    from pipeaudit.timeline import REDUCE_COLUMNS
    from pipeaudit.trace import readahead, scanner
    from pipeaudit.trace.options import ReadOptions
    from pipeaudit.trace.schema import REQUIRED_COLUMNS

    if not scanner.available():
        return  # msgspec holds the GIL: reading would only slow the imports down
    options = ReadOptions.for_share(max_memory, p.workers if p.pool or p.threads else 1)
    for k, path in enumerate(readahead.biggest(p.files, max(1, p.threads))):
        readahead.start(path, options, frozenset(REDUCE_COLUMNS) | REQUIRED_COLUMNS, keep=k > 0)


def _prestart(p: Plan) -> bool:
    """Start the pool of ``p`` (True), unless it will not pay (False)."""
    if not p.pool:
        return False
    workers = p.workers
    key = pool_shape(workers)  # the pool run_pool will ask for
    try:
        pool = take_pool(*key) or new_pool(*key)
    except Exception:  # pragma: no cover - run_pool starts one later anyway
        return False
    # A first task starts the workers (a spawn pool starts them on demand). On a thread: the
    # submit waits until the forkserver has imported its preload and forked a worker (0.3-0.5
    # s), time this process spends on its own imports instead.
    threading.Thread(target=_start_workers, args=(pool,), name="pipeaudit-pool-start",
                     daemon=True).start()
    hand_over(key, pool)
    return True


def _start_workers(pool: ProcessPoolExecutor) -> None:
    try:
        pool.submit(os.getpid)
    except Exception:  # noqa: BLE001 - shut down meanwhile: run_pool starts its own
        pass
