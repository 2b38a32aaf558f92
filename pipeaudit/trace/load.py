"""Many trace files -> one validated :class:`TraceSet`.

Ranks are decoded in parallel in a process pool (``spawn`` start method: forking a process
that already runs polars threads is unsafe) when there is more than one file and
``jobs`` > 1. ``jobs=None`` means min(files, CPUs), and then the pool is used only when the
files hold about :data:`POOL_MIN_JSON_BYTES` of JSON or more (below that, starting workers
costs more than it saves); an explicit ``jobs`` > 1 always uses it. Results are identical
either way.

``TraceSet.warnings`` holds the set-level warnings (missing ranks, clocks, disagreements)
followed by each rank's own warnings, prefixed with ``rank N (file name):``.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from pipeaudit.errors import TraceError
from pipeaudit.trace.clock import clock_warnings
from pipeaudit.trace.decode import read_trace
from pipeaudit.trace.discover import discover
from pipeaudit.trace.model import RankTrace, TraceSet
from pipeaudit.trace.source import GZIP_MAGIC
from pipeaudit.trace.validate import validate_set

#: With ``jobs=None`` the pool is used only for at least this much JSON (gzip files count
#: 10x their size on disk, a typical Kineto compression ratio): a spawned worker needs
#: 0.5-1 s to start (importing polars), about what decoding 50 MB takes in-process.
POOL_MIN_JSON_BYTES = 128 * 1024 * 1024
GZIP_RATIO_GUESS = 10


def _estimated_json_bytes(files: Sequence[Path]) -> int:
    total = 0
    for f in files:
        try:
            size = os.path.getsize(f)
            with open(f, "rb") as fh:
                gz = fh.read(2) == GZIP_MAGIC
        except OSError:
            continue
        total += size * (GZIP_RATIO_GUESS if gz else 1)
    return total
MANIFEST_NAME = "manifest.json"


def _read_one(path: str) -> tuple[str, object, object]:
    """Worker: never lets a TraceError cross the process boundary as an exception (its
    two-argument constructor does not survive pickling)."""
    try:
        return ("ok", read_trace(Path(path)), None)
    except TraceError as exc:
        return ("error", exc.path, exc.problem)


def _spawn_works() -> bool:
    """``spawn`` workers re-run the main script; that fails when it is not a file
    (``python - < script``, ``python -c``); then decode in-process."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    return path is None or os.path.isfile(path)


def _decode_all(files: list[Path], jobs: int | None) -> list[RankTrace]:
    n = len(files)
    if jobs is None:
        workers = min(n, os.cpu_count() or 1)
        use_pool = workers > 1 and _estimated_json_bytes(files) >= POOL_MIN_JSON_BYTES
    else:
        if jobs < 1:
            raise ValueError(f"jobs must be >= 1, got {jobs}")
        workers = min(n, jobs)
        use_pool = workers > 1
    if not use_pool or not _spawn_works():
        return [read_trace(f) for f in files]
    ctx = multiprocessing.get_context("spawn")
    try:
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
            results = list(pool.map(_read_one, [str(f) for f in files]))
    except BrokenProcessPool:
        raise TraceError(
            None, "a trace-decoding worker process died (out of memory?); try again with jobs=1"
        ) from None
    out: list[RankTrace] = []
    for status, value, problem in results:
        if status == "error":
            raise TraceError(value, str(problem))  # type: ignore[arg-type]
        out.append(value)  # type: ignore[arg-type]
    return out


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
        data = json.loads(found[0].read_bytes())
    except (OSError, ValueError) as exc:
        warnings.append(f"{found[0]}: manifest ignored, cannot be read ({exc})")
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
) -> TraceSet:
    """Discover, decode (in parallel) and validate the traces of one run.

    ``paths``: files, directories or globs (see :func:`discover`). Raises
    :class:`TraceError` for an unusable file or an inconsistent set (see
    :mod:`pipeaudit.trace.validate` for the rules and messages).
    """
    files = discover(paths)
    set_warnings: list[str] = []
    manifest = find_manifest(files, set_warnings)
    ranks = _decode_all(files, jobs)
    set_warnings += validate_set(ranks, allow_missing=allow_missing, manifest=manifest)
    ranks.sort(key=lambda rt: rt.rank)
    set_warnings += clock_warnings(ranks)
    rank_warnings = [f"rank {rt.rank} ({rt.path.name}): {w}" for rt in ranks for w in rt.warnings]
    return TraceSet(ranks=ranks, manifest=manifest, warnings=set_warnings + rank_warnings)
