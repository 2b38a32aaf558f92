"""A rank's compute intervals, interval sets and transfer tags, packed while they wait for
the audit: the parent process holds every rank's from the rank's reduction on.

The compute table (action, start, end: every merged compute interval of every action) is
the largest part of a reduced rank: 2,160 rows, 52 KB of int64 and about 64 KB in memory
for a 96-action rank of a real harness run. :class:`PackedIntervals` holds each column as
the differences between successive values (timestamps close together have small
differences; the first start is held as the shift), ``end`` as the interval's length; as
32-bit integers where every difference of the column fits, byte-shuffled (the first byte of
every value, then the second, ...: the high bytes, mostly zero, end up together), then
compressed with zlib at its fastest level (about 0.1 ms to pack and 0.1 ms to unpack, on
that rank). On a 1,024-rank job of 64-stage replicas (``benchmarks/make_job.py``) the job's
compute packs into 19.6 MB, 24.9 MB as plain int64 differences. :class:`PackedSpans` packs
an interval set (the rank's communication, its compute outside actions and its merged
point-to-point time) the same way. Lossless: each gives back the same values, and a clock
correction shifts them without unpacking.

The transfer tags (:data:`pipeaudit.timeline.p2p_tags.KEPT_SCHEMA`: enums, nulls) wait only
for the settling of the job's transfers, which reads each rank's once or twice; they are held
as an Arrow IPC stream compressed with zstd (:class:`PackedFrame`): 6.4 MB for the 1,024
ranks of that job, where the tables held 15.5 MB of columns and about 5 MB more of
per-table overhead (about 0.07 ms to pack and 0.06 ms to unpack a rank's).
"""

from __future__ import annotations

import io
from dataclasses import dataclass, replace

import numpy as np
import polars as pl

from pipeaudit.timeline import intervals as iv

try:  # ISA-L's zlib: the same format, several times faster (a dependency: the gzip reader's)
    from isal import isal_zlib as _zlib
except ImportError:  # pragma: no cover - isal is a dependency
    import zlib as _zlib  # type: ignore[no-redef]

#: The compute table's columns, in order (:data:`pipeaudit.timeline.attribute.COMPUTE_SCHEMA`).
COLUMNS = ("action", "start", "end")
_LEVEL = 1
_INT32 = np.iinfo(np.int32)


@dataclass(frozen=True)
class PackedIntervals:
    """An (action, start, end) int64 table, packed; ``shift_ns`` is added to start and end."""

    rows: int
    data: bytes
    shift_ns: int = 0
    #: bytes per packed value of each column: 4 where every difference fits in 32 bits
    widths: tuple[int, int, int] = (8, 8, 8)

    @classmethod
    def of(cls, table: pl.DataFrame) -> "PackedIntervals":
        """Pack ``table`` (columns :data:`COLUMNS`, int64, no nulls)."""
        if table.height == 0:
            return cls(0, b"")
        action = table["action"].to_numpy().astype(np.int64, copy=False)
        start = table["start"].to_numpy().astype(np.int64, copy=False)
        length = table["end"].to_numpy().astype(np.int64, copy=False) - start
        origin = int(start[0])  # held as the shift: the differences start from 0
        data, widths = _pack((action, start - origin, length))
        return cls(table.height, data, origin, widths)  # type: ignore[arg-type]

    def frame(self) -> pl.DataFrame:
        """The table, unpacked (a new frame each call)."""
        if self.rows == 0:
            return pl.DataFrame(schema={c: pl.Int64 for c in COLUMNS})
        action, start, length = _unpack(self.data, self.widths, self.rows)
        start += self.shift_ns
        return pl.DataFrame({"action": action, "start": start, "end": start + length})

    def shifted(self, delta_ns: int) -> "PackedIntervals":
        """The same intervals ``delta_ns`` later (earlier when negative)."""
        return replace(self, shift_ns=self.shift_ns + int(delta_ns))

    @property
    def nbytes(self) -> int:
        """Bytes held by the packed form."""
        return len(self.data)


@dataclass(frozen=True)
class PackedSpans:
    """An interval set (:data:`pipeaudit.timeline.intervals.Intervals`), packed as
    :class:`PackedIntervals` packs its table; ``shift_ns`` is added to every time."""

    rows: int
    data: bytes
    shift_ns: int = 0
    widths: tuple[int, int] = (8, 8)

    @classmethod
    def of(cls, spans: iv.Intervals) -> "PackedSpans":
        """Pack ``spans`` (two int64 arrays of one length: starts, ends)."""
        start = np.asarray(spans[0], dtype=np.int64)
        if start.size == 0:
            return cls(0, b"")
        origin = int(start[0])
        data, widths = _pack((start - origin, np.asarray(spans[1], dtype=np.int64) - start))
        return cls(start.size, data, origin, widths)  # type: ignore[arg-type]

    def spans(self) -> iv.Intervals:
        """The interval set, unpacked (new arrays each call)."""
        if self.rows == 0:
            return iv.empty()
        start, length = _unpack(self.data, self.widths, self.rows)
        start += self.shift_ns
        return start, start + length

    def shifted(self, delta_ns: int) -> "PackedSpans":
        """The same intervals ``delta_ns`` later (earlier when negative)."""
        return replace(self, shift_ns=self.shift_ns + int(delta_ns))


def _pack(columns: tuple[np.ndarray, ...]) -> tuple[bytes, tuple[int, ...]]:
    """``columns`` (int64, one length) as differences, each column narrowed and
    byte-shuffled, compressed; and each column's width in bytes."""
    cols = [_narrow(_deltas(c)) for c in columns]
    data = b"".join(_shuffled(c) for c in cols)
    return _zlib.compress(data, _LEVEL), tuple(c.itemsize for c in cols)


def _unpack(data: bytes, widths: tuple[int, ...], rows: int) -> list[np.ndarray]:
    """The int64 columns :func:`_pack` packed."""
    raw = np.frombuffer(_zlib.decompress(data), dtype=np.uint8)
    cols, at = [], 0
    for w in widths:
        planes = raw[at:at + w * rows].reshape(w, rows)
        values = planes.T.copy().view(np.int32 if w == 4 else np.int64).ravel()
        cols.append(np.cumsum(values, dtype=np.int64))
        at += w * rows
    return cols


def _narrow(values: np.ndarray) -> np.ndarray:
    """``values`` (int64) as int32 when every one fits."""
    if _INT32.min <= values.min() and values.max() <= _INT32.max:
        return values.astype(np.int32)
    return values


def _shuffled(values: np.ndarray) -> bytes:
    """The first byte of every value, then the second byte of every value, and so on."""
    return values.view(np.uint8).reshape(values.size, values.itemsize).T.tobytes()


def _deltas(values: np.ndarray) -> np.ndarray:
    """values[0], values[1] - values[0], ... (int64; a cumulative sum gives them back)."""
    out = np.empty_like(values)
    if values.size:
        out[0] = values[0]
        np.subtract(values[1:], values[:-1], out=out[1:])
    return out


@dataclass(frozen=True)
class PackedFrame:
    """Any table, packed: an Arrow IPC stream compressed with zstd (types, enums and nulls
    kept). ``rows`` is the table's height, read without unpacking."""

    rows: int
    data: bytes

    @classmethod
    def of(cls, table: pl.DataFrame) -> "PackedFrame":
        """Pack ``table``."""
        out = io.BytesIO()
        table.write_ipc_stream(out, compression="zstd")
        return cls(table.height, out.getvalue())

    def frame(self) -> pl.DataFrame:
        """The table, unpacked (a new frame each call)."""
        return pl.read_ipc_stream(io.BytesIO(self.data))
