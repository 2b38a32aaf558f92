"""One tokenizer choice per batch of events: the compiled scanner or msgspec, same columns.

:class:`ColumnTarget` is the :class:`~pipeaudit.trace.document.BatchTarget` of the decode:
each batch of events the document cuts is read by the compiled scanner
(:mod:`pipeaudit.trace.scanner`) into column buffers when the options ask for it and it
answers, else decoded by msgspec (typed Structs, :mod:`pipeaudit.trace.schema`); either way
the batch leaves as a :class:`Piece` that :meth:`pipeaudit.trace.columns.TableParts.add_piece`
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
from pipeaudit.trace.document import ArrayEnds, Batch, Malformed, NotABoundary, TooDeep, Truncated
from pipeaudit.trace.options import Tokenizer
from pipeaudit.trace.scanner import scan_raw
from pipeaudit.trace.schema import DROPPED_CATEGORIES, batch_decoder


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
    module docstring)."""

    def __init__(self, path: Path, columns: frozenset[str], tokenizer: Tokenizer,
                 sink: Callable[[Piece], None]) -> None:
        self.path = path
        self.columns = columns
        self.sink = sink
        self.scanner = tokenizer is Tokenizer.SCANNER
        self.decoder = batch_decoder(columns)

    def decode(self, batch: Batch) -> int:
        if self.scanner:
            scanned = scan_raw(batch.data, self.columns, DROPPED_CATEGORIES)
            if scanned is not None:  # the compiled scanner read it: a true event boundary
                self.sink(Piece(self.path, scanned=scanned))
                return scanned["n_events"]
        events = decode_events(self.path, self.decoder, batch)
        self.sink(Piece(self.path, events=events, index=batch.index))
        return len(events)

    def explain(self, batch: Batch) -> NoReturn:
        explain_events(self.path, self.decoder, batch)
