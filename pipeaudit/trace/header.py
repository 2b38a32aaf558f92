"""A trace's header: the small top-level members, the rank, the base time, and the
:class:`~pipeaudit.trace.model.RankTrace` around the decoded tables.

Rules (every failure a :class:`~pipeaudit.errors.TraceError` naming the file):
``distributedInfo`` must be an object whose ``rank`` is an integer >= 0 below its
``world_size`` (an integer >= 1) and whose ``backend`` is a string; ``baseTimeNanoseconds``
an integer >= 0 (integer text and whole floats are accepted). The rank comes from
``distributedInfo.rank``; without it from the caller's hint, then the file name, then 0,
each fallback with a warning.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgspec
import polars as pl

from pipeaudit.errors import TraceError, TraceErrorKind as Kind
from pipeaudit.trace.model import RankTrace
from pipeaudit.trace.naming import rank_from_name
from pipeaudit.trace.schema import HEADER_KEYS  # noqa: F401 (API: the header's keys)
from pipeaudit.trace.timestamps import LIMIT_NS

#: Categories that only GPU activity produces.
GPU_CATEGORIES: frozenset[str] = frozenset(
    {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "Kernel", "Memcpy", "Memset"}
)


def decode_members(path: Path, members: dict[str, bytes]) -> dict[str, Any]:
    """The header: each kept member's raw JSON decoded (null values left out)."""
    out = {}
    for key in HEADER_KEYS:
        raw = members.get(key)
        if raw is not None:
            try:
                value = msgspec.json.decode(raw)
            except RecursionError:
                raise TraceError(path, f"{key} is nested too deeply", Kind.TOO_DEEP) from None
            if value is not None:
                out[key] = value
    return out


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def describe(v: Any) -> str:
    """A value and its type, short: ``'zero' (str)``."""
    text = repr(v)
    if len(text) > 40:
        text = text[:37] + "..."
    return f"{text} ({type(v).__name__})"


def dist_info(path: Path, info: Any) -> tuple[int | None, int | None, str | None]:
    """(rank, world_size, backend) of ``distributedInfo``; TraceError when it is wrong."""
    if info is None:
        return None, None, None
    if not isinstance(info, dict):
        raise TraceError(path, f"distributedInfo is {describe(info)}, expected an object", Kind.BAD_VALUE)
    rank, ws, backend = info.get("rank"), info.get("world_size"), info.get("backend")
    if rank is not None and not (_is_int(rank) and rank >= 0):
        raise TraceError(path, f"distributedInfo.rank is {describe(rank)}, expected an integer >= 0",
                         Kind.BAD_VALUE)
    if ws is not None and not (_is_int(ws) and ws >= 1):
        raise TraceError(path, f"distributedInfo.world_size is {describe(ws)}, expected an integer >= 1",
                         Kind.BAD_VALUE)
    if backend is not None and not isinstance(backend, str):
        raise TraceError(path, f"distributedInfo.backend is {describe(backend)}, expected a string",
                         Kind.BAD_VALUE)
    if rank is not None and ws is not None and rank >= ws:
        raise TraceError(path, f"distributedInfo.rank {rank} is not below its world_size {ws}",
                         Kind.BAD_VALUE)
    return rank, ws, backend


def parse_base_ns(value: Any) -> int | None:
    """``baseTimeNanoseconds`` as an integer (0 when absent), or None when it is not one."""
    if value is None:
        return 0
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    elif isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if not _is_int(value) or not 0 <= value < LIMIT_NS:
        return None
    return value


def base_ns(path: Path, value: Any) -> int:
    """The checked base time (see :func:`parse_base_ns`); TraceError when it is wrong."""
    ns = parse_base_ns(value)
    if ns is None:
        raise TraceError(path, f"baseTimeNanoseconds is {describe(value)}, expected an integer >= 0",
                         Kind.BAD_VALUE)
    return ns


def check(path: Path, header: dict[str, Any]) -> int:
    """The header checks that come before the events' (distributedInfo, then the base
    time); returns the base time."""
    dist_info(path, header.get("distributedInfo"))
    return base_ns(path, header.get("baseTimeNanoseconds"))


#: How every rank fallback's warning starts (:func:`resolve_rank`).
NO_RANK = "no distributedInfo.rank"


def resolve_rank(path: Path, dist_rank: int | None, rank_hint: int | None,
                 warnings: list[str]) -> tuple[int, str]:
    """(rank, where it came from), with a warning for every fallback."""
    name_rank = rank_from_name(path)
    if dist_rank is not None:
        if rank_hint is not None and rank_hint != dist_rank:
            warnings.append(f"rank {rank_hint} given by the caller ignored: distributedInfo says rank {dist_rank}")
        elif name_rank is not None and name_rank != dist_rank:
            warnings.append(f"file name says rank {name_rank} but distributedInfo says rank {dist_rank}; using {dist_rank}")
        return dist_rank, "distributedInfo"
    if rank_hint is not None:
        warnings.append(f"{NO_RANK}; using rank {rank_hint} given by the caller")
        return rank_hint, "hint"
    if name_rank is not None:
        warnings.append(f"{NO_RANK}; rank taken from file name (rank {name_rank})")
        return name_rank, "filename"
    warnings.append(f"{NO_RANK} and no rank in the file name; assuming rank 0")
    return 0, "default"


def device_type(header: dict, events: pl.DataFrame) -> str:
    """"cpu", "cuda" or "rocm" from the categories, the device names and the runtime calls."""
    if events.height == 0 or not events["cat"].is_in(list(GPU_CATEGORIES)).any():
        return "cpu"
    props = header.get("deviceProperties")
    if isinstance(props, list):
        for p in props:
            name = p.get("name", "") if isinstance(p, dict) else ""
            if isinstance(name, str) and re.search(r"\b(AMD|Radeon|Instinct)\b|gfx\d", name):
                return "rocm"
    runtime = events.filter(pl.col("cat") == "cuda_runtime")["name"]
    if runtime.len() and runtime.str.starts_with("hip").any():
        return "rocm"
    return "cuda"


def rank_trace(path: Path, header: dict[str, Any], events: pl.DataFrame, memory: pl.DataFrame,
               size: int, rank_hint: int | None, table_warnings: list[str], *,
               n_events: int) -> RankTrace:
    """The :class:`RankTrace`: header facts, rank and the final warnings around the tables."""
    warnings: list[str] = []
    dist_rank, world_size, backend = dist_info(path, header.get("distributedInfo"))
    rank, source = resolve_rank(path, dist_rank, rank_hint, warnings)
    warnings += table_warnings
    if not n_events:
        warnings.append("the trace has no events")
    elif events.height == 0:
        warnings.append("the trace has no complete events (ph X)")
    return RankTrace(
        path=path, rank=rank, rank_source=source, world_size=world_size, backend=backend,
        device_type=device_type(header, events), base_ns=base_ns(path, header.get("baseTimeNanoseconds")),
        events=events, memory=memory, header=header, size_bytes=size, warnings=warnings,
    )


class SharedHeaderValues:
    """Makes the ranks of a job share one copy of the header values they repeat.

    Every rank of a job writes its process groups in ``distributedInfo.pg_config``, and the
    default group lists every rank of the job: at 1,024 ranks about 30 KB of Python objects
    per rank that all ranks hold the same. :meth:`share` replaces each list or object of a
    header by the equal one found at the same place in an earlier rank's header, so the
    duplicate is freed as its rank arrives; what differs is looked into, one level at a time.
    """

    #: How deep :meth:`share` looks into values that differ (pg_config's ranks lie at 4).
    MAX_DEPTH = 6

    def __init__(self) -> None:
        self._seen: dict[tuple[Any, ...], Any] = {}

    def share(self, header: dict[str, Any]) -> None:
        """Swap ``header``'s repeated values for the first copy seen (in place)."""
        for key, value in header.items():
            header[key] = self._shared((key,), value)

    def _shared(self, where: tuple[Any, ...], value: Any) -> Any:
        if not isinstance(value, (dict, list)) or len(where) > self.MAX_DEPTH:
            return value
        first = self._seen.setdefault(where, value)
        if first is not value and first == value:
            return first
        if isinstance(value, dict):
            for k, v in value.items():
                value[k] = self._shared(where + (k,), v)
        else:
            for i, v in enumerate(value):
                value[i] = self._shared(where + (i,), v)
        return value
