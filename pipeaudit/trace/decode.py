"""One trace file -> one :class:`RankTrace`: the reading pipeline.

Every file, of any size, goes through the same steps, one module each:

1. :mod:`~pipeaudit.trace.source`: the file's JSON text, chunk by chunk (regular files
   only; gzip; BOM; invalid UTF-8 replaced and counted);
2. :mod:`~pipeaudit.trace.document`: the document's structure, the header members and the
   ``traceEvents`` array cut into batches of whole events;
3. :mod:`~pipeaudit.trace.tokenizer`: each batch to columns (the compiled scanner or
   msgspec, as :class:`~pipeaudit.trace.options.ReadOptions` says);
4. :mod:`~pipeaudit.trace.header`: the header checks and the rank;
5. :mod:`~pipeaudit.trace.columns`: the drop rules, the base time and the sort.

Memory is bounded by the options (one batch and the columns built so far), whatever the
file's size. ``salvage`` reads a damaged file's complete events
(:mod:`~pipeaudit.trace.salvage`) and cuts its incomplete steps (:mod:`~pipeaudit.trace.cut`).
Every failure is a :class:`TraceError` naming the file, with its kind.

Timestamps are exact integer ns: see :mod:`pipeaudit.trace.timestamps` and
:mod:`pipeaudit.trace.clock`.
"""

from __future__ import annotations

from collections.abc import Iterable
from os import PathLike
from pathlib import Path

import polars as pl

from pipeaudit.errors import TraceError, TraceErrorKind as Kind
from pipeaudit.trace import header as hdr
from pipeaudit.trace import readahead
from pipeaudit.trace import salvage as salv
from pipeaudit.trace.columns import (  # noqa: F401 (DROPPED_CATEGORIES, ALL_COLUMNS: API)
    ALL_COLUMNS, DROPPED_CATEGORIES, TableParts, check_columns, finish_tables,
)
from pipeaudit.trace.cut import apply_cut
from pipeaudit.trace.diagnose import utf8_repair_note
from pipeaudit.trace.model import RankTrace
from pipeaudit.trace.options import ReadOptions
from pipeaudit.trace.source import TraceBytes, read_text
from pipeaudit.trace.tokenizer import tokenize_document


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
    ``max_memory`` (bytes; None: 1 GiB): the decode's memory budget, which sets the batch
    size and the largest event accepted (see :class:`ReadOptions`); any file is read in
    bounded memory. ``salvage=True``: a truncated or corrupt file yields the complete events
    before the damage and ``RankTrace.salvage`` says what was lost (see
    :mod:`pipeaudit.trace.salvage`); the salvage path holds the whole JSON text.
    """
    return decode_file(path, ReadOptions.for_budget(max_memory, salvage=salvage),
                       columns=columns, rank_hint=rank_hint)


def decode_file(path: str | PathLike[str], options: ReadOptions, *,
                columns: Iterable[str] | None = None, rank_hint: int | None = None) -> RankTrace:
    """:func:`read_trace` with explicit :class:`ReadOptions`."""
    path = Path(path)
    if rank_hint is not None and not (isinstance(rank_hint, int) and not isinstance(rank_hint, bool)
                                      and rank_hint >= 0):
        raise ValueError(f"rank_hint must be an integer >= 0, got {rank_hint!r}")
    cols = check_columns(columns)
    try:
        if options.salvage:
            return _read_salvaged(path, options, cols, rank_hint)
        ahead = readahead.take(path, options, cols)
        if ahead is not None:
            return _read_ahead(ahead, cols, rank_hint)
        return _read(TraceBytes(path), options, cols, rank_hint)
    except pl.exceptions.PanicException as exc:  # a BaseException, not an Exception
        first = (str(exc).splitlines() or [""])[0][:160]
        raise TraceError(path, f"the dataframe library (polars) failed on this trace's values "
                               f"({first})", Kind.TOO_BIG) from None
    except MemoryError:
        raise TraceError(path, f"out of memory while reading it within a {options.budget / 2**20:,.0f} "
                               "MiB budget (lower --max-memory or --jobs)", Kind.TOO_BIG) from None


def _read(text: TraceBytes, options: ReadOptions, cols: frozenset[str],
          rank_hint: int | None) -> RankTrace:
    """The pipeline (see the module docstring) over one file's text."""
    parts = TableParts(cols)
    members, n_events = tokenize_document(text, options, cols, parts.add_piece)
    return _tables(text, members, n_events, parts, rank_hint)


def _read_ahead(ahead: readahead.ReadAhead, cols: frozenset[str], rank_hint: int | None) -> RankTrace:
    """:func:`_read` of a file a thread has been reading (:mod:`pipeaudit.trace.readahead`):
    its pieces become columns as they come; the thread's error, if any, is raised after the
    pieces before it, where :func:`_read` would have raised it."""
    parts = TableParts(cols)
    try:
        for piece in ahead.pieces():
            parts.add_piece(piece)
    finally:
        ahead.cancel()  # stops the thread if a piece failed here; no effect once it is done
    done = ahead.done
    assert done is not None  # pieces() ended without raising
    return _tables(done.text, done.members, done.n_events, parts, rank_hint)


def _tables(text: TraceBytes, members: dict[str, bytes], n_events: int, parts: TableParts,
            rank_hint: int | None) -> RankTrace:
    """The header checks and the tables, once the whole document is read."""
    path = text.path
    header = hdr.decode_members(path, members)
    base_ns = hdr.check(path, header)
    parts.raise_errors()
    warnings = [utf8_repair_note(text.repaired)] if text.repaired else []
    events, memory = finish_tables(parts, base_ns, warnings)
    return hdr.rank_trace(path, header, events, memory, text.size, rank_hint, warnings,
                          n_events=n_events)


def _read_salvaged(path: Path, options: ReadOptions, cols: frozenset[str],
                   rank_hint: int | None) -> RankTrace:
    """An intact file as :func:`_read` reads it (in bounded memory); a damaged one's
    complete events (its whole text held, within ``options.salvage_limit``), cut."""
    try:
        return _read(TraceBytes(path), options, cols, rank_hint)
    except TraceError as exc:
        if exc.kind is Kind.GZIP_CORRUPT:
            raise salv.unverifiable(exc) from None
        if not salv.is_salvageable(exc):
            raise
        damage = exc.problem
    try:
        text, source = read_text(path, tolerant=True, limit=options.salvage_limit)
    except TraceError as exc:
        if exc.kind is not Kind.TOO_BIG:
            raise
        raise TraceError(path, f"{damage}; --salvage holds a damaged file's whole text and this "
                               f"one has {exc.problem}", Kind.TOO_BIG) from None
    doc, report = salv.recover(path, text, damage, size=source.size, used=source.compressed_used)
    rt = _read(source.in_memory(doc, offsets=False), options, cols, rank_hint)
    salv.complete_report(report, doc, rt)
    apply_cut(rt, report)
    return rt
