"""One trace file -> one :class:`RankTrace`.

What is kept
    * complete events (``ph == "X"``) of every category except ``python_function`` (the
      Python call stacks that ``with_stack=True`` adds: usually the most numerous events of a
      CPU trace, one per Python call, and nothing in pipeaudit reads them);
    * ``[memory]`` instant events (``ph == "i"``), as rows of ``RankTrace.memory``.

What is dropped
    flow events (``ph`` s/f/t: ac2g, fwdbwd), metadata (``ph`` M: process/thread names),
    other instant events (``Iteration Start``, ``Record Window End``), counters, and
    ``B``/``E`` pairs (Kineto never writes them; a warning counts them if present).

Rules on bad values (never a traceback; every failure is a :class:`TraceError` naming the
file): the file must be a JSON object with a ``traceEvents`` list; ``ph``, ``name`` and
``cat`` must be strings; a kept event's ``ts`` / ``dur`` must be JSON numbers. A kept event
without ``ts`` or with a negative ``dur`` is dropped and counted in a warning. Integer
``args`` that are not integers (ROCm writes ``"stream": "0x0"``) are parsed when they are
integer text and become null (counted in a warning) otherwise.

Timestamps are exact integer ns: see :mod:`pipeaudit.trace.timestamps` and
:mod:`pipeaudit.trace.clock`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from operator import attrgetter
from collections.abc import Iterable, Sequence
from os import PathLike
from pathlib import Path
from typing import Any

import msgspec
import polars as pl

from pipeaudit.errors import TraceError
from pipeaudit.trace.model import EVENT_SCHEMA, MEMORY_SCHEMA, RankTrace
from pipeaudit.trace.naming import rank_from_name
from pipeaudit.trace.scanner import ScannedBatch
from pipeaudit.trace.schema import (
    HEADER_KEYS, NO_ARGS, TRACE_DECODER, Event, TraceFile, trace_decoder,
)
from pipeaudit.trace.source import read_bytes
from pipeaudit.trace.timestamps import LIMIT_NS, raw_to_ns, raw_to_text

#: Complete-event categories that are not kept.
DROPPED_CATEGORIES: frozenset[str] = frozenset({"python_function"})

#: Categories that only GPU activity produces.
GPU_CATEGORIES: frozenset[str] = frozenset(
    {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "Kernel", "Memcpy", "Memset"}
)

MEMORY_EVENT = "[memory]"

_AT_RE = re.compile(r"^(?P<what>.*?) - at `\$(?P<where>[^`]*)`$", re.DOTALL)
_BYTE_RE = re.compile(r"\(byte (\d+)\)")


# --------------------------------------------------------------------------- parsing


def _parse(path: Path, data: bytes, notes: list[str] | None = None,
           decoder: msgspec.json.Decoder = TRACE_DECODER) -> TraceFile:
    try:
        return decoder.decode(data)
    except msgspec.ValidationError as exc:
        raise TraceError(path, _validation_problem(str(exc))) from None
    except msgspec.DecodeError as exc:
        from pipeaudit.trace.diagnose import explain_decode_error

        raise TraceError(path, explain_decode_error(data, str(exc)) or _decode_problem(str(exc))) from None
    except UnicodeDecodeError:
        # a name with bytes that are not UTF-8: keep the trace, mark the bad bytes
        from pipeaudit.trace.diagnose import repair_utf8, utf8_repair_note

        fixed, count = repair_utf8(data)
        if notes is not None:
            notes.append(utf8_repair_note(count))
        return _parse(path, fixed, None, decoder)
    except MemoryError:
        raise TraceError(path, "out of memory while parsing the JSON") from None
    except RecursionError:  # pragma: no cover - msgspec limits depth itself
        raise TraceError(path, "invalid JSON: nested too deeply") from None


def _decode_problem(msg: str) -> str:
    if "truncated" in msg:
        return "truncated JSON (the file ends in the middle of the document)"
    m = _BYTE_RE.search(msg)
    if m and m.group(1) == "0":
        return "not JSON (" + msg.replace("JSON is malformed: ", "") + ")"
    return "invalid JSON: " + msg.replace("JSON is malformed: ", "")


_JSON_KIND = {"array": "a list", "object": "an object", "str": "a string", "int": "a number",
              "float": "a number", "bool": "a boolean", "null": "null"}


def _validation_problem(msg: str) -> str:
    m = _AT_RE.match(msg)
    what, where = (m.group("what"), m.group("where")) if m else (msg, "")
    got = re.search(r"got `(\w+)`", what)
    got_kind = _JSON_KIND.get(got.group(1), got.group(1)) if got else "something else"
    if where == "":
        if "missing required field `traceEvents`" in what:
            return "not a trace: the JSON object has no traceEvents"
        return f"not a trace: the JSON is {got_kind}, expected an object with traceEvents"
    if where == ".traceEvents":
        return f"not a trace: traceEvents is {got_kind}, expected a list of events"
    field = where.lstrip(".")
    detail = what.replace("Expected", "expected")
    return f"wrong type in {field}: {detail}"


# --------------------------------------------------------------------------- header


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _describe(v: Any) -> str:
    text = repr(v)
    if len(text) > 40:
        text = text[:37] + "..."
    return f"{text} ({type(v).__name__})"


def _header(tf: TraceFile) -> dict:
    return {k: getattr(tf, k) for k in HEADER_KEYS if getattr(tf, k) is not None}


def _dist_info(path: Path, info: Any) -> tuple[int | None, int | None, str | None]:
    if info is None:
        return None, None, None
    if not isinstance(info, dict):
        raise TraceError(path, f"distributedInfo is {_describe(info)}, expected an object")
    rank, ws, backend = info.get("rank"), info.get("world_size"), info.get("backend")
    if rank is not None and not (_is_int(rank) and rank >= 0):
        raise TraceError(path, f"distributedInfo.rank is {_describe(rank)}, expected an integer >= 0")
    if ws is not None and not (_is_int(ws) and ws >= 1):
        raise TraceError(path, f"distributedInfo.world_size is {_describe(ws)}, expected an integer >= 1")
    if backend is not None and not isinstance(backend, str):
        raise TraceError(path, f"distributedInfo.backend is {_describe(backend)}, expected a string")
    if rank is not None and ws is not None and rank >= ws:
        raise TraceError(path, f"distributedInfo.rank {rank} is not below its world_size {ws}")
    return rank, ws, backend


def _base_ns(path: Path, value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    elif isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if not _is_int(value) or not 0 <= value < LIMIT_NS:
        raise TraceError(path, f"baseTimeNanoseconds is {_describe(value)}, expected an integer >= 0")
    return value


def _resolve_rank(
    path: Path, dist_rank: int | None, rank_hint: int | None, warnings: list[str]
) -> tuple[int, str]:
    name_rank = rank_from_name(path)
    if dist_rank is not None:
        if rank_hint is not None and rank_hint != dist_rank:
            warnings.append(f"rank {rank_hint} given by the caller ignored: distributedInfo says rank {dist_rank}")
        elif name_rank is not None and name_rank != dist_rank:
            warnings.append(f"file name says rank {name_rank} but distributedInfo says rank {dist_rank}; using {dist_rank}")
        return dist_rank, "distributedInfo"
    if rank_hint is not None:
        warnings.append(f"no distributedInfo.rank; using rank {rank_hint} given by the caller")
        return rank_hint, "hint"
    if name_rank is not None:
        warnings.append(f"no distributedInfo.rank; rank taken from file name (rank {name_rank})")
        return name_rank, "filename"
    warnings.append("no distributedInfo.rank and no rank in the file name; assuming rank 0")
    return 0, "default"


def _device_type(header: dict, events: pl.DataFrame) -> str:
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


# --------------------------------------------------------------------------- columns


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


def _int64(values: Sequence, what: str, warnings: list[str]) -> pl.Series:
    """Nullable Int64 column from args values; integer text ("0x0", "12") is parsed."""
    series, bad = int64_counted(values)
    _warn_non_integer(bad, what, warnings)
    return series


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
    path: Path, all_events: list[Event], kept: list[Event], field: str,
    raws: Sequence[msgspec.Raw] | None = None, index_base: int = 0,
) -> tuple[pl.Series, pl.Series]:
    """Exact ns of ``ts`` or ``dur`` of kept events; returns (ns, missing mask)."""
    ns, text = raw_to_ns(list(map(attrgetter(field), kept)) if raws is None else raws)
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
            path, f"{_event_ref(all_events, kept[i], index_base)}: {field} is {kind} ({shown}), expected a number of µs"
        )
    return ns, missing


#: Every column of :data:`EVENT_SCHEMA`; ``read_trace(columns=...)`` may ask for fewer.
ALL_COLUMNS: tuple[str, ...] = tuple(EVENT_SCHEMA)
#: Columns that are always built (the sort and the drop rules need them).
REQUIRED_COLUMNS: frozenset[str] = frozenset({"name", "cat", "ph", "ts", "dur"})
_ARG_COLUMNS = (("correlation", "args.correlation"), ("external_id", 'args["External id"]'),
                ("stream", "args.stream"), ("device", "args.device"),
                ("src_rank", 'args["Src Rank"]'), ("dst_rank", 'args["Dst Rank"]'),
                ("seq", "args.Seq"))


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
    """Columns of the kept events of one or more batches of ``traceEvents``, before the drop
    rules, the base time and the sort (:func:`finish_tables` applies them). The whole-file
    decode has one batch; the streaming decode (:mod:`pipeaudit.trace.stream`) many."""

    columns: frozenset[str]
    complete: list[pl.DataFrame] = field(default_factory=list)
    memory: list[pl.DataFrame] = field(default_factory=list)
    device_types: list = field(default_factory=list)  # raw args["Device Type"] of [memory]
    bad: dict[str, int] = field(default_factory=dict)  # non-integer args values per column
    begin_end: int = 0
    n_events: int = 0
    errors: dict[str, TraceError] | None = None  # streaming: deferred ts/dur errors

    def _count(self, key: str, n: int) -> None:
        if n:
            self.bad[key] = self.bad.get(key, 0) + n

    def add(self, path: Path, events: list[Event], index_base: int = 0) -> None:
        """Add one batch (``index_base``: index of its first event in ``traceEvents``).

        A bad ``ts``/``dur`` raises TraceError at once, unless ``errors`` is a dict: then the
        first error of each kind ("ts", "dur", "memory ts") is kept there, in file order, and
        no more columns are built (:meth:`raise_errors` raises them in the whole-file order).
        """
        kept, mem, begin_end = split_events(events)
        self.begin_end += begin_end
        self.n_events += len(events)
        ts_ = self._checked("ts", lambda: _times(path, events, kept, "ts", index_base=index_base))
        dur_ = self._checked("dur", lambda: _times(path, events, kept, "dur", index_base=index_base))
        mts_ = self._checked("memory ts", lambda: _times(path, events, mem, "ts", index_base=index_base))
        if ts_ is None or dur_ is None or mts_ is None or self.errors:
            return
        (ts, ts_missing), (dur, _), (mts, mts_missing) = ts_, dur_, mts_
        cols = self.columns
        n = len(kept)
        out = [
            pl.Series("name", _field(kept, "name"), dtype=pl.Utf8),
            pl.Series("cat", _field(kept, "cat"), dtype=pl.Utf8),
            pl.repeat("X", n, dtype=pl.Utf8, eager=True).alias("ph"),
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
        # [memory] samples
        margs = _args(mem)
        self.device_types.extend(_field(margs, "device_type"))
        total, bad_total = int64_counted(_field(margs, "total_allocated"))
        device_id, bad_id = int64_counted(_field(margs, "device_id"))
        self._count("total_allocated", bad_total)
        self._count("device_id", bad_id)
        self.memory.append(pl.DataFrame([mts.alias("ts"), total.alias("total_allocated"),
                                         device_id.alias("device_id"),
                                         mts_missing.alias("_ts_missing")]))

    def add_scanned(self, batch: ScannedBatch) -> None:
        """Add one batch read by the compiled scanner (the columns :meth:`add` builds)."""
        self.begin_end += batch.begin_end
        self.n_events += batch.n_events
        if self.errors:
            return  # an earlier batch failed: only the counts go on (as in add)
        self.complete.append(batch.complete)
        self.memory.append(batch.memory)
        self.device_types.extend(batch.device_types)

    def _checked(self, kind: str, fn):
        if self.errors is None:
            return fn()
        if kind in self.errors:
            return None
        try:
            return fn()
        except TraceError as exc:
            self.errors[kind] = exc
            return None

    def raise_errors(self) -> None:
        """Raise the first deferred error, in the order the whole-file decode checks them."""
        for kind in ("ts", "dur", "memory ts"):
            if self.errors and kind in self.errors:
                raise self.errors[kind]


def _concat(frames: list[pl.DataFrame]) -> pl.DataFrame:
    return frames[0] if len(frames) == 1 else pl.concat(frames, how="vertical", rechunk=False)


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
    dur = df["dur"]
    df = df.drop("_ts_missing").with_columns(pl.col("ts") + base_ns, pl.col("dur").fill_null(0))
    drop = ts_missing
    n_missing = int(ts_missing.sum())
    if n_missing:
        warnings.append(f"{n_missing} complete events without ts dropped")
    negative = (dur < 0).fill_null(False)
    n_negative = int(negative.sum())
    if n_negative:
        warnings.append(f"{n_negative} complete events with negative dur dropped")
        drop = drop | negative
    if n_missing or n_negative:
        df = df.filter(~drop)
    if df.height == 0 or not df["ts"].is_sorted() or _has_ties(df["ts"]):
        df = df.sort(["ts", "dur"], descending=[False, True], maintain_order=True)
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
        device_type = _int64(dtype_values, 'args["Device Type"]', warnings).alias("device_type")
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


def _has_ties(ts: pl.Series) -> bool:
    """Equal neighbours in a sorted column (then the dur order may need the full sort)."""
    return bool((ts.diff() == 0).any())


def _tables(
    path: Path, events: list[Event], base_ns: int, warnings: list[str],
    columns: frozenset[str] = frozenset(ALL_COLUMNS),
) -> tuple[pl.DataFrame, pl.DataFrame]:
    parts = TableParts(columns)
    parts.add(path, events)
    return finish_tables(parts, base_ns, warnings)


def check_columns(columns: Iterable[str] | None) -> frozenset[str]:
    """The set of event columns to build: all by default; unknown names are a ValueError."""
    if columns is None:
        return frozenset(ALL_COLUMNS)
    cols = frozenset(columns)
    unknown = sorted(cols - set(ALL_COLUMNS))
    if unknown:
        raise ValueError(f"unknown event columns {unknown}; columns are {list(ALL_COLUMNS)}")
    return cols | REQUIRED_COLUMNS


def read_trace(
    path: str | PathLike[str],
    *,
    rank_hint: int | None = None,
    columns: Iterable[str] | None = None,
    max_memory: int | None = None,
    salvage: bool = False,
) -> RankTrace:
    """Decode one Kineto / Chrome-trace JSON file (plain or gzip) into a :class:`RankTrace`.

    The rank comes from ``distributedInfo.rank``; without it from ``rank_hint`` (a caller that
    knows better, e.g. from a manifest), then from the file name, then 0; each fallback adds a
    warning. Raises :class:`TraceError` (file and problem) for anything unusable.

    ``columns``: build only these event columns (``name``, ``cat``, ``ph``, ``ts`` and ``dur``
    always; the analysis asks for ``tid`` and ``correlation`` too), to save time and memory.
    ``max_memory`` (bytes): a file whose whole-file decode would need more than this (or
    that holds more than 16 MB of JSON) is decoded in a stream of batches instead (see
    :mod:`pipeaudit.trace.stream`): same result, bounded memory; with the compiled scanner
    built (:mod:`pipeaudit.trace.scanner`) every file is, since that is faster at any size.
    ``None``: whole file, msgspec only.
    ``salvage=True``: a truncated or corrupt file yields the complete events before the damage
    and ``RankTrace.salvage`` says what was lost (see :mod:`pipeaudit.trace.salvage`); the
    salvage path always decodes the whole file.
    """
    path = Path(path)
    if rank_hint is not None and not (_is_int(rank_hint) and rank_hint >= 0):
        raise ValueError(f"rank_hint must be an integer >= 0, got {rank_hint!r}")
    cols = check_columns(columns)
    report = None
    parse_notes: list[str] = []
    if salvage:
        from pipeaudit.trace.salvage import read_salvaged

        tf, size, report = read_salvaged(path, parse_notes)
    else:
        if max_memory is not None:
            from pipeaudit.trace import stream

            must = stream.must_stream(path, max_memory)
            if must or stream.streams_for_speed(path):
                try:
                    return stream.read_trace_streaming(path, rank_hint=rank_hint, columns=cols,
                                                       max_memory=max_memory, repair_utf8=must)
                except (TraceError, UnicodeDecodeError):
                    if must:
                        raise
                    # streamed for speed only: the whole-file decode words the error (it can
                    # say which value of which event is bad) and repairs invalid UTF-8
        data, size, _gz = read_bytes(path)
        tf = _parse(path, data, parse_notes, trace_decoder(cols))
        del data  # the Raw ts/dur values keep views of it alive until the columns are built
    warnings: list[str] = parse_notes
    events, memory = _tables(path, tf.traceEvents, check_base_ns(path, tf), warnings, cols)
    rt = finish_trace(path, tf, events, memory, size, rank_hint, warnings,
                      n_events=len(tf.traceEvents))
    if report is not None:
        from pipeaudit.trace.cut import apply_cut

        apply_cut(rt, report)
    return rt


def check_base_ns(path: Path, tf: TraceFile) -> int:
    """The header's base time, after the header checks that come before the events'."""
    _dist_info(path, tf.distributedInfo)
    return _base_ns(path, tf.baseTimeNanoseconds)


def finish_trace(
    path: Path, tf: TraceFile, events: pl.DataFrame, memory: pl.DataFrame, size: int,
    rank_hint: int | None, table_warnings: list[str], *, n_events: int,
) -> RankTrace:
    """Header facts, rank and the final warnings around the decoded tables."""
    header = _header(tf)
    warnings: list[str] = []
    dist_rank, world_size, backend = _dist_info(path, tf.distributedInfo)
    base_ns = _base_ns(path, tf.baseTimeNanoseconds)
    rank, source = _resolve_rank(path, dist_rank, rank_hint, warnings)
    warnings += table_warnings
    if not n_events:
        warnings.append("the trace has no events")
    elif events.height == 0:
        warnings.append("the trace has no complete events (ph X)")
    return RankTrace(
        path=path,
        rank=rank,
        rank_source=source,
        world_size=world_size,
        backend=backend,
        device_type=_device_type(header, events),
        base_ns=base_ns,
        events=events,
        memory=memory,
        header=header,
        size_bytes=size,
        warnings=warnings,
    )
