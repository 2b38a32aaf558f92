"""The allocators: polars' told to hand freed memory back within 50 ms and to keep one arena
per core (CLI only); glibc's
told to keep freed heap in the pool's workers, which only decode (:func:`keep_freed_heap`).

On Linux, polars allocates through its own jemalloc, which its ``__init__`` configures to keep
the pages of freed tables for 0.5 s and then 1 s more as "muzzy" pages that still count as
resident (``dirty_decay_ms:500,muzzy_decay_ms:1000``). A pipeaudit run frees and builds tens
of MB of cross-rank tables (the transfers of a chunk of replicas, the audit's per-step
tables) in well under that, so the transient tables piled up in the process's resident
memory: on a 1,024-rank job, the parent's peak fell from 376 to 339 MB (``job_p64_r16``) and
from 233 to 221 MB (``job_p8_r128``) with this setting, in the same time
(measured when it was introduced; git log -S "Run K" docs/performance.md).

The setting is jemalloc's environment variable (``_RJEM_MALLOC_CONF``, polars' symbol
prefix), which polars appends to its own configuration when it is imported (a later option
wins) and jemalloc reads once, when the library first allocates. :func:`prefer_prompt_release`
sets it only before polars is imported and only when the user has not chosen a configuration
(polars' own defaults, inherited from a parent process that imported polars, are not a
choice); the pool's workers inherit it. A library caller's process (a notebook) is left
alone.
"""

from __future__ import annotations

import os
import sys
from typing import Any

#: jemalloc's configuration variable in polars' build (prefixed symbols: ``_rjem_``).
ENV = "_RJEM_MALLOC_CONF"
#: What polars' ``__init__`` writes when the variable is unset (read in polars 2.1).
POLARS_DEFAULT = "dirty_decay_ms:500,muzzy_decay_ms:1000"


def cores() -> int:
    """Cores this process may run on (also :func:`pipeaudit.prestart.cores`: defined here,
    the first module the CLI imports, which imports nothing of pipeaudit)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


#: Freed pages go back after 50 ms, purged by jemalloc's background thread: without it, an
#: arena purges only when it allocates again, and the arenas of polars' idle pool threads never
#: do (measured: 376 MB with the decay alone, 339 MB with the thread, on ``job_p64_r16``).
#: One arena per core (jemalloc's default is four): the threads that free a table and the
#: ones that build the next share arenas, so freed pages are reused before the purge. On 2
#: cores, the largest process of ``analyze`` on 4 x 100 MB: 264-270 -> 237-242 MB; the
#: parent on ``job_p64_r16``: 221-229 -> 221-223 MB (measured when introduced; git history of docs/performance.md); no slower.
CONF = f"background_thread:true,dirty_decay_ms:50,muzzy_decay_ms:0,narenas:{cores()}"


def prefer_prompt_release() -> bool:
    """Set :data:`CONF` for polars' allocator; False (and nothing changed) when polars is
    already loaded or the user chose a configuration of their own."""
    if "polars" in sys.modules or _users_choice(os.environ.get(ENV)):
        return False
    os.environ[ENV] = CONF
    return True


def _users_choice(value: str | None) -> bool:
    """True when ``value`` holds options beyond polars' own defaults."""
    return value is not None and value.removeprefix(POLARS_DEFAULT).strip(", ") != ""


# --------------------------------------------------------------------------- glibc's heap

#: glibc ``mallopt`` parameters.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
#: In a pool worker, freed memory stays in the heap up to this much and blocks up to
#: :data:`READ_MMAP_BYTES` come from the heap: the decode frees and allocates blocks of a
#: few MiB at a time (gunzip output, the batch joined, polars' and numpy's temporaries), and with
#: glibc's own thresholds (which move with the sizes freed) most of them were given back and
#: faulted in again. Measured on 4 x 100 MB of gzip: analyze 1.98 -> 1.86 s, CPU 2.81 ->
#: 2.71 s, no change in the largest process (the parent, which keeps glibc's defaults: in
#: it the same setting cost 50 MB for as much again).
READ_TRIM_BYTES = 32 << 20
READ_MMAP_BYTES = 32 << 20


def _glibc() -> Any | None:
    """glibc through ctypes, or None (another C library, another system)."""
    if not sys.platform.startswith("linux"):
        return None
    try:  # "glibc 2.35"; absent with another C library (platform.libc_ver reads the executable)
        if not os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc"):
            return None
    except (ValueError, OSError, AttributeError):
        return None
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        return libc if hasattr(libc, "mallopt") else None
    except OSError:  # pragma: no cover - no symbols to load
        return None


def keep_freed_heap() -> bool:
    """Set :data:`READ_TRIM_BYTES` and :data:`READ_MMAP_BYTES` for this process (a pool
    worker: it only decodes); False where glibc is not the allocator."""
    libc = _glibc()
    if libc is None:
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, READ_MMAP_BYTES)
                and libc.mallopt(_M_TRIM_THRESHOLD, READ_TRIM_BYTES))
