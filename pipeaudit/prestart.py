"""Start the worker pool's forkserver early, while the CLI is still importing.

The local pool (:mod:`pipeaudit.trace.executor`) forks its workers from a forkserver that
imports polars, numpy, msgspec and pipeaudit once (about 0.5 s). Started at the top of a
command, that import runs on another core while the command imports the same modules
itself, instead of after it. This module imports nothing heavy (not even
``pipeaudit.trace``, whose package imports polars), and starts the server only when the
run will use the pool: :func:`pipeaudit.trace.load.use_pool` decides the same way later,
from the same sizes.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Sequence

#: Must match :data:`pipeaudit.trace.load.POOL_MIN_JSON_BYTES` and the executor's preload.
POOL_MIN_JSON_BYTES = 128 * 1024 * 1024
PRELOAD = ["msgspec", "numpy", "polars", "pipeaudit.trace.decode", "pipeaudit.trace.stream",
           "pipeaudit.timeline.rank"]
_SUFFIXES = (".json", ".json.gz", ".json.gzip")


def _guess(paths: Sequence[str]) -> tuple[int, int]:
    """(files, JSON bytes) of trace-named files in ``paths`` (files or directories, one
    level); gzip counted by the size its trailer records."""
    files = size = 0
    for p in paths:
        try:
            if os.path.isdir(p):
                entries = [e.path for e in os.scandir(p) if e.name.endswith(_SUFFIXES)
                           and e.name != "manifest.json"]
            else:
                entries = [p]
            for f in entries:
                n = os.path.getsize(f)
                with open(f, "rb") as fh:
                    if fh.read(2) == b"\x1f\x8b" and n >= 18:
                        fh.seek(-4, os.SEEK_END)
                        n = max(n, int.from_bytes(fh.read(4), "little"))
                files += 1
                size += n
        except OSError:
            continue
    return files, size


def maybe_prestart(paths: Sequence[str], jobs: int | None, executor: str | None) -> bool:
    """Start the forkserver now if the analysis of ``paths`` will use the local pool."""
    if executor not in (None, "local", "processes"):
        return False
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return False  # pragma: no cover - Windows
    files, size = _guess(paths)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    workers = min(files, jobs if jobs is not None else cores)
    if workers < 2 or (jobs is None and executor != "processes" and size < POOL_MIN_JSON_BYTES):
        return False
    try:
        from multiprocessing import forkserver

        multiprocessing.get_context("forkserver").set_forkserver_preload(PRELOAD)
        forkserver.ensure_running()
    except Exception:  # pragma: no cover - the pool starts it later anyway
        return False
    return True
