"""The compiled event scanner: a batch of ``traceEvents`` text straight to columns.

The msgspec path decodes every event into a Struct and then builds each column from those
objects, one Python object per field. The scanner (``pipeaudit/trace/_kscan.c``, built at
install when a C compiler is there) reads the same text in one C pass: strings are interned
(one ``str`` per distinct value), times go from their decimal text to integer nanoseconds
exactly, and the columns come back as buffers. On a 110 MB harness trace it takes about
0.3 s of CPU against about 1.0 s for the msgspec decode plus the columns.

It answers only where its answer is certainly the msgspec path's, and says "no" (None) for
anything else: a syntax error, a cut that is not an event boundary, a field of the wrong
type, an escaped string in a kept column, a ``ts`` with more than three decimals or an
exponent, an ``args`` value that is not an integer. The caller then decodes that batch with
msgspec, which gives the exact result or the exact error. So results and error messages do
not depend on whether the scanner is built; ``PIPEAUDIT_NO_SCANNER=1`` turns it off (for
comparisons and benchmarks). Both read text the byte reader has already made valid UTF-8
(:mod:`pipeaudit.trace.source`), so both give the same strings and the same repair note; a
key repeated in an event is left to msgspec (the last value counts); nesting deeper than 64
levels too. Memory safety: ``tests/unit/trace/test_scanner_sanitized.py`` runs it under AddressSanitizer
and UBSan against msgspec.

Two steps: :func:`new_scanner`'s ``scan`` of each batch of a file onto one set of column
buffers (the C pass, which releases the GIL; this module imports neither polars nor numpy, so
a file can be read while they load), then :func:`to_batch` of what ``take`` hands over (its
buffers as polars columns, once per file rather than once per batch).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import polars as pl

try:
    from pipeaudit.trace import _kscan
except ImportError:  # built without a C compiler: msgspec alone
    _kscan = None

#: Set to a non-empty value to decode with msgspec alone.
DISABLE_ENV = "PIPEAUDIT_NO_SCANNER"

_WANT = {"tid": 1, "pid": 2, "correlation": 4, "external_id": 8, "stream": 16, "device": 32,
         "src_rank": 64, "dst_rank": 128, "seq": 256}
_ARG_COLUMNS = ("correlation", "external_id", "stream", "device", "src_rank", "dst_rank", "seq")


@dataclass
class ScannedBatch:
    """What :meth:`pipeaudit.trace.columns.TableParts.add` would have built from a batch
    (``complete`` without the constant ``ph`` column, which the finished table adds)."""

    complete: pl.DataFrame
    memory: pl.DataFrame
    device_types: list
    begin_end: int
    n_events: int


def available() -> bool:
    """True when the compiled scanner is built and not turned off."""
    return _kscan is not None and not os.environ.get(DISABLE_ENV)


def utf8_valid(data: bytes | memoryview | Any) -> bool | None:
    """Whether every byte of ``data`` is valid UTF-8, checked by the compiled module without
    the GIL (at memory speed); None when it is not built (the caller checks another way)."""
    return None if _kscan is None else _kscan.utf8_valid(data)


def scan_batch(data: bytes | memoryview, columns: frozenset[str], dropped: frozenset[str]) -> ScannedBatch | None:
    """Columns of ``data`` (complete events separated by commas), or None when the batch
    must be decoded by msgspec (see the module docstring)."""
    out = scan_raw(data, columns, dropped)
    return None if out is None else to_batch(out, columns)


def scan_raw(data: bytes | memoryview, columns: frozenset[str], dropped: frozenset[str]) -> dict[str, Any] | None:
    """The scanner's buffers for ``data`` (see :func:`scan_batch`), or None."""
    scanner = new_scanner(columns, dropped)
    if scanner is None or scanner.scan(data) is None:
        return None
    return scanner.take()


def new_scanner(columns: frozenset[str], dropped: frozenset[str]) -> Any | None:
    """A compiled ``Scanner`` for one file's batches, or None when the scanner is not built
    or turned off. ``scan(batch)`` adds a batch's events to its columns and returns their
    number (None: not answered, the columns unchanged, decode the batch with msgspec);
    ``take()`` hands over the columns of the batches since the last take, as buffers for
    :func:`to_batch`, and ``pending`` counts their events."""
    if not available():
        return None
    want = sum(bit for c, bit in _WANT.items() if c in columns)
    return _kscan.Scanner(tuple(sorted(c.encode() for c in dropped)), want)


def to_batch(out: dict[str, Any], columns: frozenset[str]) -> ScannedBatch:
    """:func:`scan_raw`'s buffers as the columns of a :class:`ScannedBatch`. The buffers are
    taken out of ``out`` one column at a time, so that each is freed once its column is made
    (a column made without a copy keeps its buffer)."""
    import numpy as np
    import polars as pl

    strings = pl.Series(out.pop("strings"), dtype=pl.Utf8)

    def text(key: str) -> pl.Series:
        return strings.gather(pl.Series(np.frombuffer(out.pop(key), dtype=np.int32))).alias(key)

    def nullable(key: str, mask: str, *, missing: bool = False) -> pl.Series:
        return _nullable(key, out.pop(key), out.pop(mask), missing=missing)

    ts_missing = out["ts_missing"]  # also the _ts_missing column
    cols = [text("name"), text("cat"), nullable("ts", "ts_missing", missing=True),
            nullable("dur", "dur_missing", missing=True)]
    cols += [text(c) for c in ("pid", "tid") if c in columns]
    cols += [nullable(c, c + "_valid") for c in _ARG_COLUMNS if c in columns]
    cols.append(_flags("_ts_missing", ts_missing))
    complete = pl.DataFrame(cols)
    del cols, ts_missing
    memory_ts_missing = out["memory_ts_missing"]
    memory = pl.DataFrame([
        nullable("memory_ts", "memory_ts_missing", missing=True).alias("ts"),
        nullable("total_allocated", "total_allocated_valid"),
        nullable("device_id", "device_id_valid"),
        _flags("_ts_missing", memory_ts_missing),
    ])
    del memory_ts_missing
    device_types = nullable("device_type", "device_type_valid").to_list()
    return ScannedBatch(complete, memory, device_types, out["begin_end"], out["n_events"])


def _flags(name: str, mask: bytes) -> pl.Series:
    import numpy as np
    import polars as pl

    return pl.Series(name, np.frombuffer(mask, dtype=np.uint8).view(bool), dtype=pl.Boolean)


def _nullable(name: str, values: bytes, mask: bytes, *, missing: bool = False) -> pl.Series:
    """Int64 column from a value buffer and a byte mask (``missing``: the mask marks nulls,
    else it marks valid values)."""
    import numpy as np
    import polars as pl

    series = pl.Series(name, np.frombuffer(values, dtype=np.int64), dtype=pl.Int64)
    flags = np.frombuffer(mask, dtype=np.uint8).view(bool)  # the scanner writes 0 or 1
    valid = ~flags if missing else flags
    if valid.all():
        return series
    # one vectorised pass (a scatter of the null positions costs as much per null)
    return pl.select(pl.when(pl.Series(valid)).then(series).alias(name)).to_series()
