"""Decoded events -> the columns of :class:`~pipeaudit.trace.model.RankTrace`.

What is kept
    * complete events (``ph == "X"``) of every category except ``python_function`` (the
      Python call stacks that ``with_stack=True`` adds: usually the most numerous events of a
      CPU trace, one per Python call, and nothing in pipeaudit reads them);
    * ``[memory]`` instant events (``ph == "i"``), as rows of ``RankTrace.memory``.

What is dropped
    flow events (``ph`` s/f/t: ac2g, fwdbwd), metadata (``ph`` M: process/thread names),
    other instant events (``Iteration Start``, ``Record Window End``), counters, and
    ``B``/``E`` pairs (Kineto never writes them; a warning counts them if present).

Events the analysis cannot place in time are set aside and counted in a warning (which
becomes a note of the report), never used with a made-up value: a complete event without
``ts``, without ``dur`` (its end is unknown) or with a negative ``dur``; a ``[memory]``
event without ``ts``. A ``ts`` / ``dur`` that is not a JSON number (a string, null,
``NaN``) or out of range is an error naming the event. ``args`` integers that are not
integers (ROCm writes ``"stream": "0x0"``) are parsed when they are integer text and become
null (counted in a warning) otherwise.

:class:`TableParts` collects the columns batch by batch (from msgspec Structs, or from the
compiled scanner's buffers); :func:`finish_tables` applies the rules above, the base time
and the sort, the same way for every batch size.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from pipeaudit.errors import TraceError, TraceErrorKind as Kind
from pipeaudit.trace.model import EVENT_SCHEMA, MEMORY_SCHEMA
from pipeaudit.trace.scanner import ScannedBatch, to_batch
from pipeaudit.trace.schema import DROPPED_CATEGORIES, NO_ARGS, REQUIRED_COLUMNS, Event
from pipeaudit.trace.timestamps import raw_to_ns, raw_to_text

if TYPE_CHECKING:  # pragma: no cover
    from pipeaudit.trace.tokenizer import Piece

MEMORY_EVENT = "[memory]"

#: Every column of :data:`EVENT_SCHEMA`; ``read_trace(columns=...)`` may ask for fewer.
ALL_COLUMNS: tuple[str, ...] = tuple(EVENT_SCHEMA)
_ARG_COLUMNS = (("correlation", "args.correlation"), ("external_id", 'args["External id"]'),
                ("stream", "args.stream"), ("device", "args.device"),
                ("src_rank", 'args["Src Rank"]'), ("dst_rank", 'args["Dst Rank"]'),
                ("seq", "args.Seq"))


def check_columns(columns: Iterable[str] | None) -> frozenset[str]:
    """The set of event columns to build: all by default; unknown names are a ValueError."""
    if columns is None:
        return frozenset(ALL_COLUMNS)
    cols = frozenset(columns)
    unknown = sorted(cols - set(ALL_COLUMNS))
    if unknown:
        raise ValueError(f"unknown event columns {unknown}; columns are {list(ALL_COLUMNS)}")
    return cols | REQUIRED_COLUMNS


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _to_int(v: Any) -> int | None:
    if _is_int(v):
        return v if -(1 << 63) <= v < (1 << 63) else None
    if isinstance(v, str):
        try:
            n = int(v.strip(), 0)
        except ValueError:
            return None
        return n if -(1 << 63) <= n < (1 << 63) else None
    if isinstance(v, float) and v.is_integer() and abs(v) < 2**63:
        return int(v)
    return None


def int64_counted(values: Sequence) -> tuple[pl.Series, int]:
    """Nullable Int64 column from args values and the number of values that are not
    integers (integer text such as "0x0" or "12" is parsed)."""
    try:
        return pl.Series(values, dtype=pl.Int64), 0
    except (TypeError, OverflowError, pl.exceptions.PolarsError):
        pass
    out = [_to_int(v) for v in values]
    bad = sum(1 for v, o in zip(values, out) if o is None and v is not None)
    return pl.Series(out, dtype=pl.Int64), bad


def _warn_non_integer(bad: int, what: str, warnings: list[str]) -> None:
    if bad:
        warnings.append(f"{bad} events with a non-integer {what} (set to null)")


def _args(events: list[Event]) -> list:
    args = list(map(attrgetter("args"), events))
    if None in args:  # "args": null in the file
        args = [a if a is not None else NO_ARGS for a in args]
    return args


def _event_ref(events: list[Event], e: Event, index_base: int = 0) -> str:
    for i, x in enumerate(events):
        if x is e:
            return f"traceEvents[{index_base + i}] ({e.name[:60]!r})"
    return repr(e.name[:60])  # pragma: no cover


def _times(
    path: Path, all_events: list[Event], kept: list[Event], field_name: str,
    index_base: int = 0,
) -> tuple[pl.Series, pl.Series]:
    """Exact ns of ``ts`` or ``dur`` of kept events; returns (ns, missing mask)."""
    ns, text = raw_to_ns(list(map(attrgetter(field_name), kept)))
    missing = text == ""
    bad = ns.is_null() & ~missing
    if bad.any():
        i = int(bad.arg_true()[0])
        raw = text[i]
        if raw.startswith('"'):
            kind = "a string"
        elif raw in ("null", "true", "false"):
            kind = raw
        elif raw[:1] in "[{":
            kind = "not a number"
        else:
            kind = "out of range"
        shown = raw if len(raw) <= 40 else raw[:37] + "..."
        raise TraceError(
            path, f"{_event_ref(all_events, kept[i], index_base)}: {field_name} is {kind} "
                  f"({shown}), expected a number of µs", Kind.BAD_VALUE)
    return ns, missing


def split_events(events: list[Event]) -> tuple[list[Event], list[Event], int]:
    """(kept complete events, ``[memory]`` events, count of B/E events) of a decoded list."""
    kept: list[Event] = []
    mem: list[Event] = []
    begin_end = 0
    keep = kept.append
    for e in events:
        ph = e.ph
        if ph == "X":
            if e.cat not in DROPPED_CATEGORIES:
                keep(e)
        elif ph == "i" or ph == "I":
            if e.name == MEMORY_EVENT:
                mem.append(e)
        elif ph == "B" or ph == "E":
            begin_end += 1
    return kept, mem, begin_end


def _field(events: list[Event], name: str) -> list:
    return list(map(attrgetter(name), events))


@dataclass
class TableParts:
    """Columns of the kept events of the batches of one file, before the drop rules, the
    base time and the sort (:func:`finish_tables` applies them, and adds ``ph``: always "X").

    A bad ``ts``/``dur`` does not raise at once: the first error of each kind ("ts", "dur",
    "memory ts"), in file order, is kept in :attr:`errors` and no more columns are built;
    :meth:`raise_errors` raises them in that order once the document has been read (a
    syntax error later in the file comes first, whatever the batch size)."""

    columns: frozenset[str]
    complete: list[pl.DataFrame] = field(default_factory=list)
    memory: list[pl.DataFrame] = field(default_factory=list)
    device_types: list = field(default_factory=list)  # raw args["Device Type"] of [memory]
    bad: dict[str, int] = field(default_factory=dict)  # non-integer args values per column
    begin_end: int = 0
    n_events: int = 0
    errors: dict[str, TraceError] = field(default_factory=dict)

    def _count(self, key: str, n: int) -> None:
        if n:
            self.bad[key] = self.bad.get(key, 0) + n

    def add(self, path: Path, events: list[Event], index_base: int = 0) -> None:
        """Add one batch of msgspec-decoded events (``index_base``: the ``traceEvents``
        index of its first event)."""
        kept, mem, begin_end = split_events(events)
        self.begin_end += begin_end
        self.n_events += len(events)
        ts_ = self._checked("ts", lambda: _times(path, events, kept, "ts", index_base))
        dur_ = self._checked("dur", lambda: _times(path, events, kept, "dur", index_base))
        mts_ = self._checked("memory ts", lambda: _times(path, events, mem, "ts", index_base))
        if ts_ is None or dur_ is None or mts_ is None or self.errors:
            return
        (ts, ts_missing), (dur, _), (mts, mts_missing) = ts_, dur_, mts_
        cols = self.columns
        out = [
            pl.Series("name", _field(kept, "name"), dtype=pl.Utf8),
            pl.Series("cat", _field(kept, "cat"), dtype=pl.Utf8),
            ts.alias("ts"),
            dur.alias("dur"),
        ]
        for c in ("pid", "tid"):
            if c in cols:
                out.append(raw_to_text(_field(kept, c)).alias(c))
        wanted = [c for c, _ in _ARG_COLUMNS if c in cols]
        if wanted:
            args = _args(kept)
            for c in wanted:
                series, bad = int64_counted(_field(args, c))
                self._count(c, bad)
                out.append(series.alias(c))
        out.append(ts_missing.alias("_ts_missing"))
        self.complete.append(pl.DataFrame(out))
        margs = _args(mem)
        self.device_types.extend(_field(margs, "device_type"))
        total, bad_total = int64_counted(_field(margs, "total_allocated"))
        device_id, bad_id = int64_counted(_field(margs, "device_id"))
        self._count("total_allocated", bad_total)
        self._count("device_id", bad_id)
        self.memory.append(pl.DataFrame([mts.alias("ts"), total.alias("total_allocated"),
                                         device_id.alias("device_id"),
                                         mts_missing.alias("_ts_missing")]))

    def add_piece(self, piece: Piece) -> None:
        """Add one batch as the tokenizer left it (:class:`~pipeaudit.trace.tokenizer.Piece`)."""
        if piece.scanned is not None:
            self.add_scanned(to_batch(piece.scanned, self.columns))
        else:
            self.add(piece.path, piece.events, piece.index)

    def add_scanned(self, batch: ScannedBatch) -> None:
        """Add one batch read by the compiled scanner (the columns :meth:`add` builds)."""
        self.begin_end += batch.begin_end
        self.n_events += batch.n_events
        if self.errors:
            return  # an earlier batch failed: only the counts go on (as in add)
        self.complete.append(batch.complete)
        self.memory.append(batch.memory)
        self.device_types.extend(batch.device_types)

    def _checked(self, kind: str, fn: Callable[[], Any]) -> Any:
        if kind in self.errors:
            return None
        try:
            return fn()
        except TraceError as exc:
            self.errors[kind] = exc
            return None

    def raise_errors(self) -> None:
        """Raise the first deferred error: ts, then dur, then a memory event's ts."""
        for kind in ("ts", "dur", "memory ts"):
            if kind in self.errors:
                raise self.errors[kind]


def _concat(frames: list[pl.DataFrame]) -> pl.DataFrame:
    return frames[0] if len(frames) == 1 else pl.concat(frames, how="vertical", rechunk=False)


def _set_aside(df: pl.DataFrame, mask: pl.Series, why: str, warnings: list[str]) -> int:
    """Count the rows of ``mask`` and say so (with the first one's name)."""
    n = int(mask.sum())
    if n:
        first = df.filter(mask)["name"][0]
        warnings.append(f"{n} complete events {why} dropped (the first: {first[:60]!r})")
    return n


def finish_tables(parts: TableParts, base_ns: int, warnings: list[str]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Apply the drop rules, the base time and the sort to the collected columns; add the
    decode warnings in their fixed order."""
    if not parts.complete:
        parts.add(Path(), [])  # no events: empty tables of the right shape
    if parts.begin_end:
        warnings.append(f"{parts.begin_end} begin/end events (ph B/E) ignored: only complete events (ph X) are read")
    for c, what in _ARG_COLUMNS:
        _warn_non_integer(parts.bad.get(c, 0), what, warnings)
    df = _concat(parts.complete)
    parts.complete = []
    ts_missing = df["_ts_missing"]
    dur_missing = df["dur"].is_null() & ~ts_missing
    negative = (df["dur"] < 0).fill_null(False) & ~ts_missing
    dropped = (_set_aside(df, ts_missing, "without ts", warnings)
               + _set_aside(df, dur_missing, "without dur (their end is unknown)", warnings)
               + _set_aside(df, negative, "with negative dur", warnings))
    if dropped:
        df = df.filter(~(ts_missing | dur_missing | negative))
    # the schema's order, the base time added, ph (always "X") made once: one pass
    df = df.select([pl.lit("X", dtype=pl.Utf8).alias(c) if c == "ph" else
                    (pl.col(c) + base_ns) if c == "ts" else pl.col(c)
                    for c in EVENT_SCHEMA if c in df.columns or c == "ph"])
    df = in_time_order(df)
    df = df.cast({c: t for c, t in EVENT_SCHEMA.items() if c in df.columns})  # type: ignore[arg-type]

    # ---- memory samples
    mdf = _concat(parts.memory)
    parts.memory = []
    dtype_values = parts.device_types
    if any(isinstance(v, str) for v in dtype_values):
        device_type = pl.Series(
            "device_type", [None if v is None else str(v) for v in dtype_values], dtype=pl.Utf8
        )
    else:
        series, bad = int64_counted(dtype_values)
        _warn_non_integer(bad, 'args["Device Type"]', warnings)
        device_type = series.alias("device_type")
    _warn_non_integer(parts.bad.get("total_allocated", 0), 'args["Total Allocated"]', warnings)
    _warn_non_integer(parts.bad.get("device_id", 0), 'args["Device Id"]', warnings)
    mts_missing = mdf["_ts_missing"]
    mdf = mdf.drop("_ts_missing").with_columns(pl.col("ts") + base_ns, device_type)
    n_mmissing = int(mts_missing.sum())
    if n_mmissing:
        warnings.append(f"{n_mmissing} [memory] events without ts dropped")
        mdf = mdf.filter(~mts_missing)
    mdf = mdf.sort("ts", maintain_order=True)
    if mdf.schema["device_type"] != pl.Utf8:
        mdf = mdf.cast(MEMORY_SCHEMA)  # type: ignore[arg-type]
    return df, mdf


#: :func:`in_time_order` lays the table's sorted runs end to end (no copy) up to this many
#: runs; beyond, it gathers the rows once.
MAX_RUNS = 64


def in_time_order(df: pl.DataFrame) -> pl.DataFrame:
    """``df`` (``ts`` and ``dur`` without nulls) sorted by ``ts``, then longest first, the file's
    order breaking ties: the same table as polars' stable sort on ``(ts, dur descending)``.

    A trace is nearly in time order already (Kineto writes the host events by start and the
    profiler's own span, which starts first, last of all: one row out of place in a 100 MB
    rank). Without two events at the same ``ts``, the sorted table is the file's runs of
    rows in order, laid end to end as chunks (nothing copied), instead of every column
    gathered anew (12-15 ms for 350k events)."""
    if df.height < 2:
        return df
    ts = df["ts"].to_numpy()
    order = np.argsort(ts, kind="stable")  # adaptive: a few sorted runs cost a few passes
    in_order = ts[order]
    if bool((in_order[1:] == in_order[:-1]).any()):  # ties: the duration decides
        return df.sort(["ts", "dur"], descending=[False, True], maintain_order=True)
    starts = np.flatnonzero(np.diff(order) != 1) + 1
    if starts.size >= MAX_RUNS:
        df = df[order]
    elif starts.size:
        bounds = [0, *starts.tolist(), order.size]
        df = pl.concat([df.slice(int(order[a]), b - a) for a, b in zip(bounds, bounds[1:])],
                       how="vertical", rechunk=False)
    return df.with_columns(pl.col("ts").set_sorted())

