"""A rank's compute intervals, packed while they wait for the audit.

The compute table (action, start, end: every merged compute interval of every action) is
the largest part of a reduced rank: 2,160 rows, 52 KB of int64 and about 64 KB in memory
for a 96-action rank of a real harness run, and the parent process holds one per rank
from the rank's reduction to the audit. Packed, it is about 15 KB: each column as the
differences between successive values (timestamps that are close together have small
differences), ``end`` as the interval's length, compressed with zlib at its fastest level
(about 0.1 ms to pack and 0.1 ms to unpack, measured on that rank). Lossless: :meth:`PackedIntervals.frame`
gives back the same table, row for row.

A clock correction shifts the table without unpacking it (:meth:`PackedIntervals.shifted`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

try:  # ISA-L's zlib: the same format, several times faster (a dependency: the gzip reader's)
    from isal import isal_zlib as _zlib
except ImportError:  # pragma: no cover - isal is a dependency
    import zlib as _zlib  # type: ignore[no-redef]

#: The compute table's columns, in order (:data:`pipeaudit.timeline.attribute.COMPUTE_SCHEMA`).
COLUMNS = ("action", "start", "end")
_LEVEL = 1


@dataclass(frozen=True)
class PackedIntervals:
    """An (action, start, end) int64 table, packed; ``shift_ns`` is added to start and end."""

    rows: int
    data: bytes
    shift_ns: int = 0

    @classmethod
    def of(cls, table: pl.DataFrame) -> "PackedIntervals":
        """Pack ``table`` (columns :data:`COLUMNS`, int64, no nulls)."""
        if table.height == 0:
            return cls(0, b"")
        action = table["action"].to_numpy().astype(np.int64, copy=False)
        start = table["start"].to_numpy().astype(np.int64, copy=False)
        length = table["end"].to_numpy().astype(np.int64, copy=False) - start
        cols = np.stack([_deltas(action), _deltas(start), _deltas(length)])
        return cls(table.height, _zlib.compress(cols.tobytes(), _LEVEL))

    def frame(self) -> pl.DataFrame:
        """The table, unpacked (a new frame each call)."""
        if self.rows == 0:
            return pl.DataFrame(schema={c: pl.Int64 for c in COLUMNS})
        cols = np.frombuffer(_zlib.decompress(self.data), dtype=np.int64).reshape(3, self.rows)
        action, start, length = (np.cumsum(c) for c in cols)
        start += self.shift_ns
        return pl.DataFrame({"action": action, "start": start, "end": start + length})

    def shifted(self, delta_ns: int) -> "PackedIntervals":
        """The same intervals ``delta_ns`` later (earlier when negative)."""
        return PackedIntervals(self.rows, self.data, self.shift_ns + int(delta_ns))

    @property
    def nbytes(self) -> int:
        """Bytes held by the packed form."""
        return len(self.data)


def _deltas(values: np.ndarray) -> np.ndarray:
    """values[0], values[1] - values[0], ... (int64; a cumulative sum gives them back)."""
    out = np.empty_like(values)
    if values.size:
        out[0] = values[0]
        np.subtract(values[1:], values[:-1], out=out[1:])
    return out
