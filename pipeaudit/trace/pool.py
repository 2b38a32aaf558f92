"""The local worker pool of the trace layer: its shape, how its workers start and what they
import, and the pool a command may have started early (:mod:`pipeaudit.prestart` starts it,
:func:`take_pool` hands it to :mod:`pipeaudit.trace.executor`). Imports nothing heavy: not
even multiprocessing until a pool starts.

The workers import polars, numpy, msgspec and pipeaudit (about 0.5-0.7 s). How:

* **several workers** (every pool: ``--jobs N`` starts N): a ``forkserver`` that imports
  them once; every worker is a cheap fork of it (0.07 s of CPU for two workers against
  1.2 s for two spawns). The server keeps its copy of the imports (about 60 MB of RSS).
* **one worker**, or no ``forkserver`` on the platform: ``spawn`` workers that import them
  in their initializer.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pipeaudit.allocator import cores, keep_freed_heap

if TYPE_CHECKING:  # pragma: no cover
    from concurrent.futures import ProcessPoolExecutor

#: With ``jobs=None`` the pool is used only for at least this much JSON: a worker pool
#: needs 0.5-1 s to start (one forkserver importing polars), about what decoding 64 MB
#: takes in-process; below 128 MB the saving is too small to be worth it.
POOL_MIN_JSON_BYTES = 128 * 1024 * 1024
#: What the pool's workers import before their first task: numpy.ma too (polars imports it
#: when it makes a column from a numpy array), and the module of analyze's per-rank job.
PRELOAD = ["msgspec", "numpy", "numpy.ma", "polars", "pipeaudit.trace.decode",
           "pipeaudit.timeline.rank", "pipeaudit.timeline.build"]
#: This process helps the starting pool only in runs of at most this many items. With more,
#: the time it saves is a small part of the run, and the memory its own decodes leave
#: behind adds to the results it holds until the audit (1,024 ranks: 205 MB at the end of
#: the ranks phase with its help, 162 MB without).
HELP_MAX_ITEMS = 64
#: With ``jobs=None``, a run of more files than cores but at most this many per core (and at
#: most :data:`RANK_PER_PROCESS_FILES` files) gets a process per file (this one and a worker
#: for each other file), sharing the cores: every rank is in flight at once, so that none is
#: left running alone at the end while the other cores wait (4 ranks on 2 cores with 2
#: workers: the last rank alone for about a quarter of the ranks phase). Each process holds
#: one rank at a time, so the largest process is the same; the machine holds one rank per file.
RANK_PER_PROCESS_MAX = 2
#: ... and at most this many files: beyond, the tail is a small part of the ranks phase and a
#: process per file would hold too many ranks at once.
RANK_PER_PROCESS_FILES = 16
#: With ``jobs=None``, a run that the pool would read, of at most this many files, is read by
#: threads of this process instead (:func:`use_threads`).
THREADS_MAX_FILES = 16



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


#: The pool started early (:func:`pipeaudit.prestart.maybe_prestart`):
#: ((workers, polars threads), pool).
_started: tuple[tuple[int, int], ProcessPoolExecutor] | None = None


def hand_over(key: tuple[int, int], pool: ProcessPoolExecutor) -> None:
    """Keep ``pool`` (started early for ``key`` = (workers, polars threads)) for
    :func:`take_pool`."""
    global _started
    _started = (key, pool)


def take_pool(workers: int, polars_threads: int) -> ProcessPoolExecutor | None:
    """The pool started early, if it is this one (a different one is shut
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


def workers_and_pool(n_files: int, jobs: int | None, json_bytes: int,
                     processes: bool = False) -> tuple[int, bool]:
    """(workers, whether the local pool is used) for ``n_files`` files holding ``json_bytes``
    of JSON: ``jobs`` workers (None: the cores, or a process per file for up to
    :data:`RANK_PER_PROCESS_MAX` files per core and :data:`RANK_PER_PROCESS_FILES` files), at
    most one per file; the pool for two
    workers or more when ``jobs`` is given or the executor is ``processes``, else from
    :data:`POOL_MIN_JSON_BYTES` of JSON."""
    n_cores = cores()
    if (jobs is None and not processes and n_cores < n_files
            <= min(RANK_PER_PROCESS_MAX * n_cores, RANK_PER_PROCESS_FILES)):
        workers = n_files - 1  # this process reads the first
    else:
        workers = min(n_files, jobs if jobs is not None else n_cores)
    return workers, workers > 1 and (jobs is not None or processes
                                     or json_bytes >= POOL_MIN_JSON_BYTES)


def use_threads(n_files: int, jobs: int | None, json_bytes: int, processes: bool = False) -> int:
    """Threads of this process that read a run's ranks instead of the local pool (0: none).

    A rank's decode runs without the GIL: ISA-L's gunzip, the compiled scanner's pass, and for
    a plain file no read at all (it is mapped: :mod:`pipeaudit.trace.source`); polars and numpy
    release it too. So threads decode in parallel without a pool's start: no server importing
    polars again (about 0.4 s of CPU), no worker's fresh memory, no result sent back, and no
    hand-over between processes to wait for on a busy machine. With ``jobs=None``, a run the
    pool would read (:func:`workers_and_pool`) of 2 to :data:`THREADS_MAX_FILES` files gets a
    thread per core (at most one per file) when the scanner is on; an explicit ``jobs``, the
    ``processes`` executor and bigger runs keep the pool (its workers bound the memory of each
    rank to a process)."""
    from pipeaudit.trace import scanner

    if (jobs is not None or processes or not 1 < n_files <= THREADS_MAX_FILES
            or not scanner.available()):
        return 0
    workers, pool = workers_and_pool(n_files, jobs, json_bytes)
    return min(n_files, cores()) if pool else 0
