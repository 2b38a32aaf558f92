"""What a command starts before its own imports: the local worker pool, and the read of its
first rank (:func:`start_early`).

The local pool (:mod:`pipeaudit.trace.executor`) needs its workers to import polars, numpy,
msgspec and pipeaudit (about 0.5-0.7 s). How:

* **several workers** (every pool: ``--jobs N`` starts N): a ``forkserver`` that imports
  them once; every worker is a cheap fork of it (0.07 s of CPU for two workers against
  1.2 s for two spawns). The server keeps its copy of the imports (about 60 MB of RSS).
* **one worker**, or no ``forkserver`` on the platform: ``spawn`` workers that import them
  in their initializer.

Started at the top of a command (:func:`maybe_prestart`), that import runs on another core
while the command imports the same modules itself, instead of after it (the first task,
which waits for it, is submitted from a thread); ``run_pool`` then takes the started pool
(:func:`take_pool`). :func:`start_early` also starts reading the rank this process decodes
first (:mod:`pipeaudit.trace.readahead`). This module imports nothing heavy (not even
multiprocessing until a pool starts), and starts the pool only when the run will use it
(:func:`workers_and_pool`, which :func:`pipeaudit.trace.load.use_pool` asks again later).
"""

from __future__ import annotations

import importlib
import os
import stat
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipeaudit.allocator import cores, keep_freed_heap

if TYPE_CHECKING:  # pragma: no cover
    from concurrent.futures import ProcessPoolExecutor

#: With ``jobs=None`` the pool is used only for at least this much JSON: a worker pool
#: needs 0.5-1 s to start (one forkserver importing polars), about what decoding 64 MB
#: takes in-process; below 128 MB the saving is too small to be worth it.
POOL_MIN_JSON_BYTES = 128 * 1024 * 1024
#: What the pool's workers import before their first task.
PRELOAD = ["msgspec", "numpy", "polars", "pipeaudit.trace.decode", "pipeaudit.timeline.rank"]
_SUFFIXES = (".json", ".json.gz", ".json.gzip")

#: This process helps the starting pool only in runs of at most this many items. With more,
#: the time it saves is a small part of the run, and the memory its own decodes leave
#: behind adds to the results it holds until the audit (1,024 ranks: 205 MB at the end of
#: the ranks phase with its help, 162 MB without).
HELP_MAX_ITEMS = 64


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


def pool_shape(jobs: int) -> tuple[int, int]:
    """(pool workers, polars threads per worker) for ``jobs`` jobs: a worker per job (this
    process only helps while they start), sharing the cores."""
    return jobs, max(1, cores() // jobs)


def init_worker(polars_threads: int, preload: Sequence[str] = ()) -> None:
    """Pool worker initializer: polars' thread count (effective before polars starts its
    thread pool, true for a fresh worker), glibc's heap kept
    (:func:`pipeaudit.allocator.keep_freed_heap`), then the imports of a spawned worker."""
    os.environ["POLARS_MAX_THREADS"] = str(polars_threads)
    keep_freed_heap()  # a worker only decodes: its batches reuse the heap
    for name in preload:
        importlib.import_module(name)


def start_method(workers: int) -> str:
    """How a pool of ``workers`` processes starts them: ``spawn`` for one, else ``forkserver``
    where the platform has it."""
    import multiprocessing

    if workers > 1 and "forkserver" in multiprocessing.get_all_start_methods():
        return "forkserver"
    return "spawn"


def new_pool(workers: int, polars_threads: int) -> ProcessPoolExecutor:
    """A local pool of ``workers`` processes (see the module docstring for how they start)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    method = start_method(workers)
    ctx = multiprocessing.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload(PRELOAD)  # imported once, in the server
        return ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=init_worker,
                                   initargs=(polars_threads,))
    return ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=init_worker,
                               initargs=(polars_threads, PRELOAD))


#: The pool started by :func:`maybe_prestart`: ((workers, polars threads), pool).
_started: tuple[tuple[int, int], ProcessPoolExecutor] | None = None


def take_pool(workers: int, polars_threads: int) -> ProcessPoolExecutor | None:
    """The pool :func:`maybe_prestart` started, if it is this one (a different one is shut
    down); None otherwise."""
    global _started
    started, _started = _started, None
    if started is None:
        return None
    key, pool = started
    if key == (workers, polars_threads):
        return pool
    pool.shutdown(wait=False, cancel_futures=True)
    return None


@dataclass(frozen=True)
class Plan:
    """How a local run of some files will go, guessed before anything heavy is imported
    (:func:`workers_and_pool`, which :func:`pipeaudit.trace.load.use_pool` asks again later)."""

    files: list[tuple[str, int]]  # (trace file, JSON bytes)
    workers: int
    pool: bool  # the local pool: else every rank is read in this process


def workers_and_pool(n_files: int, jobs: int | None, json_bytes: int,
                     processes: bool = False) -> tuple[int, bool]:
    """(workers, whether the local pool is used) for ``n_files`` files holding ``json_bytes``
    of JSON: ``jobs`` workers (None: the cores), at most one per file; the pool for two
    workers or more when ``jobs`` is given or the executor is ``processes``, else from
    :data:`POOL_MIN_JSON_BYTES` of JSON."""
    workers = min(n_files, jobs if jobs is not None else cores())
    return workers, workers > 1 and (jobs is not None or processes
                                     or json_bytes >= POOL_MIN_JSON_BYTES)


def plan(paths: Sequence[str], jobs: int | None, executor: str | None) -> Plan | None:
    """The :class:`Plan` of reading ``paths`` here; None for a cluster executor."""
    if executor not in (None, "local", "processes"):
        return None
    files = _guess(paths)
    workers, pool = workers_and_pool(len(files), jobs, sum(n for _, n in files),
                                     processes=executor == "processes")
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
    options = ReadOptions.for_share(max_memory, p.workers if p.pool else 1)
    readahead.start(readahead.first_of(p.files), options,
                    frozenset(REDUCE_COLUMNS) | REQUIRED_COLUMNS)


def _prestart(p: Plan) -> bool:
    """Start the pool of ``p`` (True), unless it will not pay (False)."""
    global _started
    if not p.pool:
        return False
    workers = p.workers
    key = pool_shape(workers)  # the pool run_pool will ask for
    try:
        pool = take_pool(*key) or new_pool(*key)
    except Exception:  # pragma: no cover - run_pool starts one later anyway
        _started = None
        return False
    # A first task starts the workers (a spawn pool starts them on demand). On a thread: the
    # submit waits until the forkserver has imported its preload and forked a worker (0.3-0.5
    # s), time this process spends on its own imports instead.
    threading.Thread(target=_start_workers, args=(pool,), name="pipeaudit-pool-start",
                     daemon=True).start()
    _started = (key, pool)
    return True


def _start_workers(pool: ProcessPoolExecutor) -> None:
    try:
        pool.submit(os.getpid)
    except Exception:  # noqa: BLE001 - shut down meanwhile: run_pool starts its own
        pass
