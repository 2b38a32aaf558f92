"""The decoded form of traces: one :class:`RankTrace` per file, a :class:`TraceSet` per run.

``RankTrace.events`` columns (exact names and dtypes, sorted by ``ts``, then longest first
so that a parent span comes before the children that start with it):

==============  =======  ==============================================================
name            Utf8     event name
cat             Utf8     category ("" when missing)
ph              Utf8     always "X" (only complete events are kept)
ts              Int64    start, absolute ns since the Unix epoch (``base_ns`` + ts)
dur             Int64    duration in ns (0 when missing)
pid             Utf8     process id as text ("" when missing); may be "Spans", "Traces"
tid             Utf8     thread id as text; GPU events use the stream number
correlation     Int64    args.correlation (links a cuda_runtime launch and its kernel)
external_id     Int64    args["External id"] (links a CPU op and its launches)
stream          Int64    args.stream (GPU events; ROCm's hex text "0x0" is parsed)
device          Int64    args.device
src_rank        Int64    args["Src Rank"] (NCCL recv: the global rank it receives from)
dst_rank        Int64    args["Dst Rank"] (NCCL send: the global rank it sends to)
seq             Int64    args.Seq (the process group's collective sequence number)
==============  =======  ==============================================================

``RankTrace.memory`` columns: ``ts`` Int64 (absolute ns), ``total_allocated`` Int64,
``device_id`` Int64, ``device_type`` Int64 (Utf8 if a trace writes it as text).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

EVENT_SCHEMA: dict[str, pl.DataType] = {
    "name": pl.Utf8(),
    "cat": pl.Utf8(),
    "ph": pl.Utf8(),
    "ts": pl.Int64(),
    "dur": pl.Int64(),
    "pid": pl.Utf8(),
    "tid": pl.Utf8(),
    "correlation": pl.Int64(),
    "external_id": pl.Int64(),
    "stream": pl.Int64(),
    "device": pl.Int64(),
    "src_rank": pl.Int64(),
    "dst_rank": pl.Int64(),
    "seq": pl.Int64(),
}

MEMORY_SCHEMA: dict[str, pl.DataType] = {
    "ts": pl.Int64(),
    "total_allocated": pl.Int64(),
    "device_id": pl.Int64(),
    "device_type": pl.Int64(),
}

RANK_SOURCES = ("distributedInfo", "hint", "filename", "default")


@dataclass
class RankTrace:
    """One rank's trace file, decoded."""

    path: Path
    rank: int
    rank_source: str  # "distributedInfo" | "hint" | "filename" | "default"
    world_size: int | None
    backend: str | None
    device_type: str  # "cpu" | "cuda" | "rocm"
    base_ns: int
    events: pl.DataFrame
    memory: pl.DataFrame
    header: dict
    size_bytes: int
    warnings: list[str] = field(default_factory=list)
    #: set when the file was damaged and read with ``salvage=True`` (a SalvageReport)
    salvage: Any = None

    @property
    def start_ns(self) -> int | None:
        """Earliest event start (absolute ns), None for a trace without events."""
        return self.events["ts"].min() if self.events.height else None  # type: ignore[return-value]

    @property
    def end_ns(self) -> int | None:
        """Latest event end (absolute ns), None for a trace without events."""
        if not self.events.height:
            return None
        return self.events.select((pl.col("ts") + pl.col("dur")).max()).item()

    @property
    def host(self) -> str | None:
        h = self.header.get("host_name")
        return h if isinstance(h, str) else None

    def info(self) -> "RankInfo":
        """The small facts of this rank (no tables): what set validation needs."""
        return RankInfo(path=self.path, rank=self.rank, rank_source=self.rank_source,
                        world_size=self.world_size, backend=self.backend,
                        device_type=self.device_type, base_ns=self.base_ns, header=self.header,
                        size_bytes=self.size_bytes, warnings=list(self.warnings),
                        start_ns=self.start_ns, end_ns=self.end_ns)

    def __repr__(self) -> str:
        return (
            f"RankTrace(rank={self.rank}, path={str(self.path)!r}, events={self.events.height}, "
            f"memory={self.memory.height}, device_type={self.device_type!r})"
        )


@dataclass
class RankInfo:
    """A :class:`RankTrace` without its tables: rank, run facts, time span and warnings.

    Small and picklable: what a worker that reduces a rank sends back next to its result,
    and what :func:`pipeaudit.trace.validate.validate_set` and the clock checks read (they
    accept either)."""

    path: Path
    rank: int
    rank_source: str
    world_size: int | None
    backend: str | None
    device_type: str
    base_ns: int
    header: dict
    size_bytes: int
    warnings: list[str] = field(default_factory=list)
    start_ns: int | None = None
    end_ns: int | None = None

    @property
    def host(self) -> str | None:
        h = self.header.get("host_name")
        return h if isinstance(h, str) else None


@dataclass
class TraceSet:
    """The traces of one run, one per rank, sorted by rank."""

    ranks: list[RankTrace]
    manifest: dict | None = None
    warnings: list[str] = field(default_factory=list)

    def __getitem__(self, rank: int) -> RankTrace:
        for rt in self.ranks:
            if rt.rank == rank:
                return rt
        raise KeyError(f"rank {rank} is not in this trace set (ranks: {self.rank_ids})")

    def __contains__(self, rank: object) -> bool:
        return any(rt.rank == rank for rt in self.ranks)

    def __iter__(self) -> Iterator[RankTrace]:
        return iter(self.ranks)

    def __len__(self) -> int:
        return len(self.ranks)

    @property
    def rank_ids(self) -> list[int]:
        return [rt.rank for rt in self.ranks]

    @property
    def world_size(self) -> int | None:
        """world_size from distributedInfo (all ranks agree, checked at load), else None."""
        for rt in self.ranks:
            if rt.world_size is not None:
                return rt.world_size
        return None

    @property
    def salvaged(self) -> list:
        """SalvageReports of the ranks read with ``salvage=True`` that were damaged."""
        return [rt.salvage for rt in self.ranks if rt.salvage is not None]

    @property
    def origin_ns(self) -> int | None:
        """Earliest event start over all ranks: a common zero for display."""
        starts = [s for s in (rt.start_ns for rt in self.ranks) if s is not None]
        return min(starts) if starts else None

    def __repr__(self) -> str:
        return f"TraceSet(ranks={self.rank_ids}, warnings={len(self.warnings)})"
