"""Many trace files -> one validated :class:`TraceSet`, or one small result per rank.

:func:`map_ranks` is the engine: it decodes every file and applies a per-rank *job* to it
(``reduce_rank`` for the analysis) where the executor says (see
:mod:`pipeaudit.trace.executor`: in-process, a local process pool, a Dask cluster), and
sends back only the job's result and the rank's :class:`RankInfo`: memory is bounded by the
largest rank being worked on, not by the sum of the ranks. :func:`load_traces` is the
same with the whole :class:`RankTrace` as the result.

``jobs=None`` means min(files, cores), and then the pool is used only when the files hold
about :data:`POOL_MIN_JSON_BYTES` of JSON or more (below that, starting workers costs more
than it saves); an explicit ``jobs`` > 1 always uses it. Results are identical either way.

Errors come in the order of a sequential run: a file that cannot be decoded (the first in
file order), then the set checks (:mod:`pipeaudit.trace.validate`), then a job's error (the
first in rank order).

``TraceSet.warnings`` holds the set-level warnings (missing ranks, clocks, disagreements)
followed by each rank's own warnings, prefixed with ``rank N (file name):``.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from pipeaudit import progress, timings
from pipeaudit.errors import PipeauditError, TraceError, TraceErrorKind
from pipeaudit.trace.clock import clock_warnings
from pipeaudit.trace.cut import align_steps
from pipeaudit.trace.decode import decode_file
from pipeaudit.trace.discover import discover
from pipeaudit.trace.pool import POOL_MIN_JSON_BYTES, use_threads, workers_and_pool  # noqa: F401 (API)
from pipeaudit.trace.executor import Executor, cpu_count, parse_executor, run_tasks
from pipeaudit.trace import readahead
from pipeaudit.trace.header import NO_RANK, SharedHeaderValues
from pipeaudit.trace.model import RankInfo, RankTrace, TraceSet
from pipeaudit.trace.options import (  # noqa: F401 (the memory helpers: API, tests)
    DEFAULT_MEMORY_SHARE, ReadOptions, available_memory, default_max_memory, parse_size,
)
from pipeaudit.trace.source import estimated_json_bytes, open_regular
from pipeaudit.trace.validate import validate_set

MANIFEST_NAME = "manifest.json"
#: A manifest bigger than this is not a harness manifest: it is ignored, not read.
MAX_MANIFEST_BYTES = 16 << 20


def _estimated_json_bytes(files: Sequence[Path]) -> int:
    total = 0
    for f in files:
        try:
            total += estimated_json_bytes(f)
        except (OSError, TraceError):
            continue
    return total


def use_pool(files: Sequence[Path], jobs: int | None, json_bytes: int | None = None, *,
             processes: bool = False) -> tuple[int, bool]:
    """(workers, whether a local pool pays) for ``jobs`` as :func:`load_traces` reads it
    (:func:`pipeaudit.trace.pool.workers_and_pool`); ``json_bytes``: the files' estimated JSON
    bytes, when the caller has them already; ``processes``: the ``processes`` executor."""
    if jobs is not None and jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    if jobs is None and not processes and json_bytes is None:
        json_bytes = _estimated_json_bytes(files)
    return workers_and_pool(len(files), jobs, json_bytes or 0, processes=processes)


@dataclass
class RankTask:
    """What one worker does: decode ``path`` with ``options`` and apply ``job`` (None: keep
    the trace). ``options`` None (a Dask worker): a share of that machine's memory."""

    path: str
    job: Callable[[RankTrace], Any] | None = None
    columns: tuple[str, ...] | None = None
    options: ReadOptions | None = None
    salvage: bool = False


@dataclass
class RankOutcome:
    """A worker's answer: the rank's facts and the job's result, or the errors (as values,
    never raised across the process boundary)."""

    info: RankInfo | None = None
    value: Any = None
    decode_error: PipeauditError | None = None
    job_error: PipeauditError | None = None


def run_rank_task(task: RankTask) -> RankOutcome:
    """Worker entry point (module level, picklable)."""
    options = task.options
    if options is None:  # on a remote worker: a share of that machine's memory
        options = ReadOptions.for_share(None, cpu_count(), salvage=task.salvage)
    try:
        rt = decode_file(Path(task.path), options, columns=task.columns)
    except PipeauditError as exc:
        return RankOutcome(decode_error=exc)
    info = rt.info()
    if task.job is None:
        return RankOutcome(info=info, value=rt)
    try:
        value = task.job(rt)
    except PipeauditError as exc:
        return RankOutcome(info=info, job_error=exc)
    except pl.exceptions.PanicException as exc:  # a BaseException: the values broke polars
        first = (str(exc).splitlines() or [""])[0][:160]
        return RankOutcome(info=info, job_error=TraceError(
            task.path, f"the dataframe library (polars) failed on this trace's values ({first})",
            TraceErrorKind.TOO_BIG))
    return RankOutcome(info=info, value=value)


def _on_arrival(total: int) -> Callable[[RankOutcome], None]:
    """What this process does with each rank's outcome as it arrives: its header shares the
    values every rank repeats (:class:`SharedHeaderValues`), and the active progress
    reporter hears of one more rank done."""
    report = progress.active()
    shared = SharedHeaderValues()
    done = 0
    lock = threading.Lock()

    def arrived(outcome: RankOutcome) -> None:
        nonlocal done
        with lock:
            if outcome.info is not None:
                shared.share(outcome.info.header)
            done += 1
            if report is not None:
                report(done, total)

    return arrived


@dataclass
class RankResults:
    """:func:`map_ranks`' answer: per rank (sorted by rank) its facts and result."""

    infos: list[RankInfo]
    values: list[Any]
    manifest: dict | None = None
    warnings: list[str] = field(default_factory=list)


def map_ranks(
    paths: Sequence[str | os.PathLike[str]] | str | os.PathLike[str],
    job: Callable[[RankTrace], Any] | None = None,
    *,
    jobs: int | None = None,
    allow_missing: bool = False,
    executor: str | Executor | None = None,
    columns: Iterable[str] | None = None,
    max_memory: int | str | None = None,
    job_for_rank: Callable[[dict | None], Callable[[RankTrace], Any] | None] | None = None,
    salvage: bool = False,
) -> RankResults:
    """Decode every rank, apply ``job`` to it where ``executor`` says, validate the set.

    ``job`` must be picklable (a module-level function or a ``functools.partial`` of one)
    and return something small; ``job_for_rank(manifest)`` may build it once the manifest
    is known. ``columns``: the event columns the job reads (see :func:`read_trace`).
    ``max_memory``: the memory budget in bytes (or text like ``"4G"``) for the whole
    decode; each worker gets its share, and a file too big for it is decoded as a stream.
    ``salvage``: read damaged files with :mod:`pipeaudit.trace.salvage` (see :func:`read_trace`).
    Raises :class:`TraceError` (and the job's own :class:`PipeauditError`). With
    ``PIPEAUDIT_TIMINGS=1`` the ranks phase names the reader's options.
    """
    exe = parse_executor(executor)
    files = discover(paths)
    set_warnings: list[str] = []
    manifest = find_manifest(files, set_warnings)
    if job_for_rank is not None:
        job = job_for_rank(manifest)
    sizes = [_estimated_json_bytes([f]) for f in files]
    workers, pool = use_pool(files, jobs, sum(sizes), processes=exe.kind == "processes")
    threads = 0
    if exe.kind == "local" and pool and jobs is None:
        threads = use_threads(len(files), jobs, sum(sizes))
        if threads:
            workers, pool = threads, False
    options: ReadOptions | None
    if exe.kind == "dask" and max_memory is None:  # each worker judges its own machine
        options = None
    else:
        shares = 1 if exe.kind == "dask" else (workers if pool or threads else 1)
        options = ReadOptions.for_share(max_memory, shares, salvage=salvage)
    cols = tuple(columns) if columns is not None else None
    tasks = [RankTask(str(f), job, cols, options, salvage) for f in files]
    # biggest files first, so that no worker is left with a big one at the end; the file
    # this process has been reading ahead (the CLI starts one) first of all: it takes that one
    biggest_first = _read_ahead_first(sorted(range(len(tasks)), key=lambda i: -sizes[i]), files)
    timings.mark_once("start")
    try:
        done = run_tasks(run_rank_task, [tasks[i] for i in biggest_first], executor=exe,
                         workers=workers, pool=pool, on_done=_on_arrival(len(tasks)),
                         threads=threads)
    finally:
        readahead.drop()  # not taken (another executor, a pool this process does not help)
    where = (str(exe) if exe.kind == "dask" else f"{threads} threads" if threads
             else _jobs(workers if pool else 1))
    read = options.describe() if options is not None else "each worker's own budget"
    timings.mark("ranks", f"{len(tasks)} ranks, {where}, read: {read}")
    outcomes: list[RankOutcome] = [None] * len(tasks)  # type: ignore[list-item]
    for i, o in zip(biggest_first, done):
        outcomes[i] = o
    for o in outcomes:
        if o.decode_error is not None:
            raise o.decode_error
    infos = [o.info for o in outcomes]
    set_warnings += validate_set(infos, allow_missing=allow_missing, manifest=manifest)  # type: ignore[arg-type]
    order = sorted(range(len(outcomes)), key=lambda i: infos[i].rank)  # type: ignore[union-attr]
    outcomes = [outcomes[i] for i in order]
    for o in outcomes:
        if o.job_error is not None:
            raise o.job_error
    infos = [o.info for o in outcomes]  # type: ignore[misc]
    set_warnings += clock_warnings(infos)  # type: ignore[arg-type]
    rank_warnings = [f"rank {i.rank} ({i.path.name}): {w}" for i in infos for w in i.warnings
                     if not (_sole_process(infos) and w.startswith(NO_RANK))]
    return RankResults(infos=infos, values=[o.value for o in outcomes], manifest=manifest,  # type: ignore[arg-type]
                       warnings=set_warnings + rank_warnings)


def _read_ahead_first(order: list[int], files: Sequence[Path]) -> list[int]:
    """``order`` with the files being read ahead (:mod:`pipeaudit.trace.readahead`) first."""
    first: list[int] = []
    for ahead in readahead.pending_paths():
        at = next((k for k, i in enumerate(order) if readahead.same_file(files[i], ahead)), None)
        if at is None:
            readahead.drop()  # not one of this run's files
            return order
        first.append(order[at])
    return first + [i for i in order if i not in first]


def _jobs(n: int) -> str:
    return "1 job" if n == 1 else f"{n} jobs"


def _sole_process(infos) -> bool:
    """One trace of a job of one process (no world size above 1): where its rank came from
    is no news (a single-process run writes no distributedInfo)."""
    return len(infos) == 1 and (infos[0].world_size or 1) == 1


def find_manifest(files: Sequence[Path], warnings: list[str]) -> dict | None:
    """The ``manifest.json`` next to the traces (the pipeaudit harness writes one)."""
    dirs: list[Path] = []
    for f in files:
        d = f.parent
        if d not in dirs:
            dirs.append(d)
    found = [d / MANIFEST_NAME for d in dirs if (d / MANIFEST_NAME).is_file()]
    if not found:
        return None
    if len(found) > 1:
        warnings.append(
            f"several {MANIFEST_NAME} files ({', '.join(str(p) for p in found[:3])}); using {found[0]}"
        )
    try:
        with open_regular(found[0]) as fh:
            raw = fh.read(MAX_MANIFEST_BYTES + 1)
        if len(raw) > MAX_MANIFEST_BYTES:
            raise ValueError(f"more than {MAX_MANIFEST_BYTES >> 20} MiB, not a harness manifest")
        data = json.loads(raw)
    except (OSError, ValueError, RecursionError) as exc:
        warnings.append(f"{found[0]}: manifest ignored, cannot be read ({exc})")
        return None
    except TraceError as exc:
        warnings.append(f"{found[0]}: manifest ignored, cannot be read ({exc.problem})")
        return None
    if not isinstance(data, dict):
        warnings.append(f"{found[0]}: manifest ignored, it is not a JSON object")
        return None
    return data


def load_traces(
    paths: Sequence[str | os.PathLike[str]] | str | os.PathLike[str],
    *,
    jobs: int | None = None,
    allow_missing: bool = False,
    executor: str | Executor | None = None,
    max_memory: int | str | None = None,
    salvage: bool = False,
) -> TraceSet:
    """Discover, decode (in parallel) and validate the traces of one run.

    ``paths``: files, directories or globs (see :func:`discover`). Raises
    :class:`TraceError` for an unusable file or an inconsistent set (see
    :mod:`pipeaudit.trace.validate` for the rules and messages). Every rank's tables are
    kept: to analyse big runs in bounded memory, reduce each rank where it is decoded with
    :func:`map_ranks` (as ``pipeaudit.load`` does).

    ``salvage=True`` recovers the complete events of truncated or corrupt files and excludes,
    on every rank, the steps the damage cut (see :mod:`pipeaudit.trace.salvage`).
    """
    res = map_ranks(paths, None, jobs=jobs, allow_missing=allow_missing, executor=executor,
                    max_memory=max_memory, salvage=salvage)
    # steps cut by damage (salvage) or by a failed harness run (partial traces) are excluded
    warnings = align_steps(res.values) + list(res.warnings)
    return TraceSet(ranks=res.values, manifest=res.manifest, warnings=warnings)
