"""One tokenizer choice per batch of events: the compiled scanner or msgspec, same columns.

:class:`ColumnTarget` is the :class:`~pipeaudit.trace.document.BatchTarget` of the decode:
each batch of events the document cuts is read by the compiled scanner
(:mod:`pipeaudit.trace.scanner`) onto column buffers when the options ask for it and it
answers, else decoded by msgspec (typed Structs, :mod:`pipeaudit.trace.schema`); the
scanner's batches leave together (one piece for a file it reads whole), msgspec's one by one,
as :class:`Piece` s that :meth:`pipeaudit.trace.columns.TableParts.add_piece`
turns into the same columns. The scanner answers only where its answer is certainly
msgspec's, so the choice changes the speed, never the result or the message. This module
imports no polars: a file can be tokenized while polars loads
(:mod:`pipeaudit.trace.readahead`).

:func:`decode_events` is the msgspec side, for any element type (``pipeaudit.report.merge``
reads the events as raw JSON with it): it tells the document whether a cut is an event
boundary and words what is wrong with a batch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import msgspec

from pipeaudit.errors import TraceError, TraceErrorKind as Kind
from pipeaudit.trace import diagnose
from pipeaudit.trace.document import (
    ArrayEnds, Batch, Document, Malformed, NotABoundary, TooDeep, Truncated,
)
from pipeaudit.trace.options import ReadOptions, Tokenizer
from pipeaudit.trace.scanner import new_scanner
from pipeaudit.trace.schema import DROPPED_CATEGORIES, HEADER_KEYS, batch_decoder
from pipeaudit.trace.source import TraceBytes

_HEADER = frozenset(HEADER_KEYS)


def decode_events(path: Path, decoder: msgspec.json.Decoder, batch: Batch) -> list[Any]:
    """The events of ``batch`` decoded by ``decoder`` (a decoder of a list), or the
    document's signals: :class:`NotABoundary` when the batch does not end at an event's end,
    :class:`ArrayEnds` when the array closes inside it, :class:`Malformed` / :class:`TooDeep`
    for the file's own errors; a wrong type is a TraceError naming the event."""
    n = len(batch.data)
    events, msg, at = _decode(path, decoder, b"".join((b"[", batch.data, b"]")), batch)
    if msg is None:
        return events
    if "truncated" in msg or (at is not None and at >= n + 1):
        raise NotABoundary  # a string or a nested value left open by the cut
    if "trailing characters" in msg and at is not None:
        # "[" + events + "]" closed before the end: the array's "]" ends the last event
        end = len(bytes(batch.data[:at - 2]).rstrip(b" \t\r\n")) - 1
        raise ArrayEnds(end)
    raise Malformed((at or 1) - 1, diagnose.msgspec_reason(msg))


def explain_events(path: Path, decoder: msgspec.json.Decoder, batch: Batch) -> NoReturn:
    """``batch`` has no event boundary to its end: raise its own error, else
    :class:`Truncated`."""
    _, msg, at = _decode(path, decoder, b"".join((b"[", batch.data)), batch)
    if msg is None:
        raise Truncated  # pragma: no cover - "[" + events never closes
    if "truncated" in msg or at is None:
        raise Truncated
    raise Malformed(at - 1, diagnose.msgspec_reason(msg))


def _decode(path: Path, decoder: msgspec.json.Decoder, data: bytes,
            batch: Batch) -> tuple[Any, str | None, int | None]:
    """(decoded, None, None), or (None, msgspec's message, the byte it names) when the text
    is not JSON; a wrong type is a TraceError naming the event, nesting too deep TooDeep."""
    try:
        return decoder.decode(data), None, None
    except msgspec.ValidationError as exc:
        raise TraceError(path, diagnose.validation_problem(str(exc), batch.index),
                         Kind.BAD_VALUE) from None
    except msgspec.DecodeError as exc:
        msg = str(exc)
        return None, msg, diagnose.msgspec_byte(msg)
    except RecursionError:
        raise TooDeep from None


@dataclass
class Piece:
    """One batch of events, tokenized: the compiled scanner's buffers (``scanned``), or the
    events msgspec decoded (``events``, the first at ``traceEvents[index]``)."""

    path: Path
    scanned: dict[str, Any] | None = None
    events: list[Any] | None = None
    index: int = 0


class ColumnTarget:
    """Batches of events -> :class:`Piece` s, handed to ``sink`` in file order (see the
    module docstring). The batches the compiled scanner reads accumulate on its columns and
    leave as one piece when a batch needs msgspec and at :meth:`finish`, which the reader
    calls once the document is read."""

    def __init__(self, path: Path, columns: frozenset[str], tokenizer: Tokenizer,
                 sink: Callable[[Piece], None]) -> None:
        self.path = path
        self.columns = columns
        self.sink = sink
        self.scanner = new_scanner(columns, DROPPED_CATEGORIES) if tokenizer is Tokenizer.SCANNER else None
        self.decoder = batch_decoder(columns)

    def decode(self, batch: Batch) -> int:
        if self.scanner is not None:
            n = self.scanner.scan(batch.data)
            if n is not None:  # the compiled scanner read it: a true event boundary
                return n
            self.finish()  # what it read so far goes first
        events = decode_events(self.path, self.decoder, batch)
        self.sink(Piece(self.path, events=events, index=batch.index))
        return len(events)

    def finish(self) -> None:
        """Hand over the scanner's columns of the batches read since the last piece."""
        if self.scanner is not None and self.scanner.pending:
            self.sink(Piece(self.path, scanned=self.scanner.take()))

    def explain(self, batch: Batch) -> NoReturn:
        explain_events(self.path, self.decoder, batch)


def tokenize_document(text: TraceBytes, options: ReadOptions, columns: frozenset[str],
                      sink: Callable[[Piece], None]) -> tuple[dict[str, bytes], int]:
    """Read a whole trace document: its events as :class:`Piece` s handed to ``sink`` in
    file order (the last included), its header's members (raw JSON by key) and its number
    of events. The one reading loop of :func:`pipeaudit.trace.decode.decode_file` and of
    :mod:`pipeaudit.trace.readahead`."""
    target = ColumnTarget(text.path, columns, options.effective_tokenizer(), sink)
    doc = Document(text, target, batch_bytes=options.batch_bytes,
                   max_event_bytes=options.max_event_bytes, keep=_HEADER)
    members = doc.read()
    target.finish()
    return members, doc.n_events
