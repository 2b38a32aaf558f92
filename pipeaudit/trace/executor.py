"""Where per-rank work runs: in this process, in a local process pool, or on a Dask cluster.

Executors (``--executor``):

``local`` (default)
    This machine. With ``jobs`` > 1 the ranks run in a local process pool when the input is
    big enough for the pool to pay (see :func:`pipeaudit.trace.load.use_pool`), else one
    after the other in this process.
    A run of a few files that the pool would read is read by threads of this process
    instead (:func:`pipeaudit.trace.pool.use_threads`).
``processes``
    Always a local process pool of ``jobs`` workers (also for small inputs).
``dask://HOST:PORT`` (or ``tcp://HOST:PORT``)
    A running Dask ``distributed`` scheduler (``pip install 'pipeaudit[dask]'``). One task
    per rank: the worker reads the file *by its path* (the traces must be on a file system
    that every worker sees, with the same paths) and sends back only the reduced result.
    ``jobs`` is ignored: the cluster's workers decide the parallelism.

With ``jobs`` = N the local pool has N worker processes. In runs of up to
:data:`HELP_MAX_ITEMS` ranks this process works too until the pool's first result arrives:
it starts on the first rank at once, while the workers are starting, then only collects
their results. It holds every rank's result until the audit,
so decoding more here would add the decode's memory to the process that is already the
largest (at 1,024 ranks: 245 MB against 162 MB at the end of the ranks phase, with the
same wall time on two cores). How the workers start (one ``spawn`` worker, or forks of a
preloaded ``forkserver`` for more) and how the CLI starts them early is
:mod:`pipeaudit.prestart`'s job. Each worker gets ``POLARS_MAX_THREADS = cores // workers``
so that workers do not oversubscribe the cores.

Tasks must be picklable module-level callables. A task never raises across the process
boundary: it returns its errors as values (see :mod:`pipeaudit.trace.load`).
"""

from __future__ import annotations

import os
import re
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

from pipeaudit.errors import ConfigError, TraceError

from pipeaudit.trace.pool import (  # noqa: F401 (PRELOAD: tests)
    HELP_MAX_ITEMS, PRELOAD, cores, new_pool, pool_shape, take_pool,
)

_DASK_RE = re.compile(r"^(dask|tcp|tls)://(?P<addr>[^/\s]+)/?$")


@dataclass(frozen=True)
class Executor:
    """A parsed ``--executor`` value."""

    kind: str  # "local" | "processes" | "dask"
    address: str | None = None  # dask scheduler address, e.g. "tcp://127.0.0.1:8786"

    def __str__(self) -> str:
        return self.kind if self.address is None else f"dask://{self.address.split('://', 1)[1]}"


def parse_executor(spec: str | Executor | None) -> Executor:
    """``None``/``"local"``, ``"processes"`` or ``"dask://host:port"``; ConfigError otherwise."""
    if isinstance(spec, Executor):
        return spec
    if spec is None or spec == "local":
        return Executor("local")
    if spec == "processes":
        return Executor("processes")
    m = _DASK_RE.match(spec.strip())
    if m:
        scheme = "tls" if spec.startswith("tls://") else "tcp"
        return Executor("dask", f"{scheme}://{m.group('addr')}")
    raise ConfigError(
        f"--executor {spec!r} is not one of: local, processes, dask://HOST:PORT"
    )


def cpu_count() -> int:
    """Cores this process may run on."""
    return cores()


def _spawn_works() -> bool:
    """``spawn``/``forkserver`` workers re-import the main module; that fails when it is not
    a file (``python - < script``, ``python -c``): then run in-process."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    return path is None or os.path.isfile(path)


def run_pool(fn: Callable[[Any], Any], items: Sequence[Any], workers: int,
             on_done: Callable[[Any], None] | None = None) -> list[Any]:
    """``[fn(x) for x in items]`` on a local pool of ``workers`` processes (order kept):
    they take the items in order, each the next one as soon as it is free.

    This process works too while the pool is starting, instead of waiting: it takes the
    first item (the one a CLI has been reading ahead), then items until the pool's first
    result arrives (its items need no pickling back), then only collects; with more than
    :data:`HELP_MAX_ITEMS` items it only collects. ``on_done(result)`` is called as each
    item is done (from this process's threads).
    """
    if workers <= 1 or len(items) <= 1 or not _spawn_works():
        return run_here(fn, items, on_done)
    size, threads = pool_shape(workers)
    results: list[Any] = [None] * len(items)
    claim = _Claims(len(items))
    failure: list[BaseException] = []
    pool_ready = threading.Event()
    helps = len(items) <= HELP_MAX_ITEMS
    try:
        pool = take_pool(size, threads) or new_pool(size, threads)
        mine = claim.next() if helps else None  # before the pool takes any
        try:
            feeder = threading.Thread(target=_feed, args=(pool, fn, items, results, claim,
                                                           size, failure, on_done, pool_ready),
                                      daemon=True)
            feeder.start()
            try:
                while mine is not None:
                    results[mine] = fn(items[mine])
                    if on_done is not None:
                        on_done(results[mine])
                    mine = claim.next() if not pool_ready.is_set() else None
            except BaseException:
                claim.stop()  # the pool takes no more items
                raise
            finally:
                feeder.join()
        finally:
            # Every item is done: the workers' own exit (an interpreter's teardown, about
            # 0.1 s) overlaps what the caller does next instead of delaying it.
            pool.shutdown(wait=False, cancel_futures=True)
    except BrokenProcessPool:
        raise TraceError(None, _died_message()) from None
    if failure:
        if isinstance(failure[0], BrokenProcessPool):
            raise TraceError(None, _died_message()) from None
        raise failure[0]
    return results


class _Claims:
    """Hands out item indices in order to whoever asks first (thread-safe)."""

    def __init__(self, n: int) -> None:
        self._next, self._n, self._lock = 0, n, threading.Lock()

    def next(self) -> int | None:
        with self._lock:
            if self._next >= self._n:
                return None
            self._next += 1
            return self._next - 1

    def stop(self) -> None:
        with self._lock:
            self._next = self._n


def _feed(pool: ProcessPoolExecutor, fn: Callable[[Any], Any], items: Sequence[Any],
          results: list[Any], claim: _Claims, slots: int, failure: list[BaseException],
          on_done: Callable[[Any], None] | None, ready: threading.Event) -> None:
    """Keep ``slots`` items running in ``pool``; store their results; set ``ready`` at the
    first."""
    running: dict[Future, int] = {}
    try:
        while True:
            while len(running) < slots and (i := claim.next()) is not None:
                running[pool.submit(fn, items[i])] = i
            if not running:
                return
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for f in done:
                i = running.pop(f)
                results[i] = f.result()
                ready.set()
                if on_done is not None:
                    on_done(results[i])
    except BaseException as exc:  # BrokenProcessPool or a bug in fn: the caller raises it
        claim.stop()
        failure.append(exc)
        for f in running:
            f.cancel()


def _died_message() -> str:
    """Why a pool worker may have died: memory, or (from a script) the script re-imported."""
    main = sys.modules.get("__main__")
    script = (main is not None and getattr(main, "__spec__", None) is None
              and getattr(main, "__file__", None) and "pipeaudit.cli.main" not in sys.modules)
    if script:
        return ("a trace-decoding worker process died: out of memory, or pipeaudit was called "
                "at the top level of a script (worker processes re-import the script: put the "
                "call under `if __name__ == \"__main__\":`); try again with jobs=1")
    return "a trace-decoding worker process died (out of memory?); try again with jobs=1"


def run_here(fn: Callable[[Any], Any], items: Sequence[Any],
             on_done: Callable[[Any], None] | None = None) -> list[Any]:
    """``[fn(x) for x in items]`` in this process, calling ``on_done(result)`` after each."""
    out = []
    for x in items:
        out.append(fn(x))
        if on_done is not None:
            on_done(out[-1])
    return out


def run_dask(fn: Callable[[Any], Any], items: Sequence[Any], address: str,
             on_done: Callable[[Any], None] | None = None) -> list[Any]:
    """``[fn(x) for x in items]`` as one task per item on the Dask scheduler at ``address``."""
    try:
        from distributed import Client
    except ImportError:
        raise ConfigError(
            "--executor dask://... needs the Dask distributed package: pip install 'pipeaudit[dask]'"
        ) from None
    try:
        client = Client(address, timeout="10s", set_as_default=False)
    except (OSError, TimeoutError) as exc:
        raise ConfigError(f"cannot reach the Dask scheduler at {address}: {exc}") from None
    try:
        from distributed import as_completed

        futures = client.map(fn, list(items), pure=False)
        where = {f.key: i for i, f in enumerate(futures)}
        out: list[Any] = [None] * len(futures)
        done = as_completed(futures, with_results=True, loop=client.loop)
        futures.clear()  # each result is fetched as it is done and released on its worker:
        for future, value in done:  # a worker holds its tasks in flight, not all it ran
            out[where[future.key]] = value
            future.release()
            if on_done is not None:
                on_done(value)
        return out
    finally:
        client.close()


def run_threads(fn: Callable[[Any], Any], items: Sequence[Any], threads: int,
                on_done: Callable[[Any], None] | None = None) -> list[Any]:
    """``[fn(x) for x in items]`` on ``threads`` threads of this process (order kept): each
    takes the next item as soon as it is free; ``on_done(result)`` is called as each is done
    (from those threads). The first error (in item order) is raised once every item is done."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="pipeaudit-rank") as ex:
        futures = [ex.submit(_run_one, fn, x, on_done) for x in items]
    return [f.result() for f in futures]


def _run_one(fn: Callable[[Any], Any], item: Any, on_done: Callable[[Any], None] | None) -> Any:
    result = fn(item)
    if on_done is not None:
        on_done(result)
    return result


def run_tasks(fn: Callable[[Any], Any], items: Sequence[Any], *, executor: Executor,
              workers: int, pool: bool, on_done: Callable[[Any], None] | None = None,
              threads: int = 0) -> list[Any]:
    """Run ``fn`` over ``items`` where ``executor`` says; ``pool``: use the local pool;
    ``threads``: use that many threads of this process instead
    (:func:`pipeaudit.trace.pool.use_threads`); ``on_done(result)`` is called in this
    process as each item is done."""
    if executor.kind == "dask":
        assert executor.address is not None
        return run_dask(fn, items, executor.address, on_done)
    if threads > 1 and len(items) > 1:
        return run_threads(fn, items, threads, on_done)
    if pool:
        return run_pool(fn, items, workers, on_done)
    return run_here(fn, items, on_done)
