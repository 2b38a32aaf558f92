"""Error types. Every failure pipeaudit reports to a user is one of these.

The CLI turns a :class:`PipeauditError` into one line on stderr and exit code 2;
anything else escaping is a bug.
"""

from __future__ import annotations

import enum
from pathlib import Path


class PipeauditError(Exception):
    """Base class of every error pipeaudit raises on purpose."""

    exit_code = 2


class TraceErrorKind(enum.Enum):
    """What is wrong with a trace file (or a set of them): callers route on this, never on
    the wording of :attr:`TraceError.problem`."""

    #: the path: no such file, permission denied, a directory, a FIFO or device, a symlink loop
    PATH = "path"
    #: an empty file, a gzip stream of nothing, only whitespace
    EMPTY = "empty"
    #: not JSON at all: binary, another compressor, another text encoding, an HTML page
    NOT_JSON = "not-json"
    #: the gzip stream ends early (a killed writer): the data before it is a prefix of the JSON
    GZIP_TRUNCATED = "gzip-truncated"
    #: bytes after the last complete gzip member that are neither a member nor zero padding
    GZIP_TRAILING_GARBAGE = "gzip-trailing-garbage"
    #: corrupt compressed data or a checksum mismatch: nothing decompressed can be trusted
    GZIP_CORRUPT = "gzip-corrupt"
    #: the JSON text ends in the middle of the document
    JSON_TRUNCATED = "json-truncated"
    #: a syntax error inside the document (garbage, a zero-filled tail, trailing characters)
    JSON_INVALID = "json-invalid"
    #: nested deeper than the decoder goes
    TOO_DEEP = "too-deep"
    #: an event, a string or the header larger than the reader's bound
    TOO_BIG = "too-big"
    #: valid JSON that is not a trace (a list, an object without traceEvents, ...)
    NOT_A_TRACE = "not-a-trace"
    #: a value of the wrong type or out of range (an event's ts, distributedInfo.rank, ...)
    BAD_VALUE = "bad-value"
    #: the files do not form one run (duplicate ranks, different runs, missing ranks, ...)
    SET = "set"
    #: ``--salvage`` was asked for and could not recover anything usable
    SALVAGE_FAILED = "salvage-failed"
    #: readable traces in which no pipeline stage was found (see :mod:`pipeaudit.audit.found`)
    NO_PIPELINE = "no-pipeline"
    #: anything else
    OTHER = "other"


#: Damage that ``--salvage`` can recover the complete events before (see
#: :mod:`pipeaudit.trace.salvage`). Corrupt gzip data is not: zlib notices corruption only
#: some way after it, and what it decompressed in between may be garbage that still parses.
SALVAGEABLE_KINDS: frozenset[TraceErrorKind] = frozenset({
    TraceErrorKind.GZIP_TRUNCATED, TraceErrorKind.GZIP_TRAILING_GARBAGE,
    TraceErrorKind.JSON_TRUNCATED, TraceErrorKind.JSON_INVALID,
})


def _printable(text: str) -> str:
    """``text`` with control characters (a newline in a file name) written as escapes, so
    that a message stays one line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class TraceError(PipeauditError):
    """A trace file (or a set of them) cannot be used: names the file, the problem and its
    :class:`TraceErrorKind`."""

    def __init__(self, path: str | Path | None, problem: str,
                 kind: TraceErrorKind = TraceErrorKind.OTHER) -> None:
        self.path = str(path) if path is not None else None
        self.problem = problem
        self.kind = kind
        text = f"{_printable(self.path)}: {problem}" if self.path else problem
        super().__init__(_printable(text))

    @property
    def salvageable(self) -> bool:
        """True when ``--salvage`` can recover the complete events before the damage."""
        return self.kind in SALVAGEABLE_KINDS

    def __reduce__(self):  # picklable across worker processes
        return (type(self), (self.path, self.problem, self.kind))


class ScheduleError(PipeauditError):
    """A schedule cannot be built or replayed (invalid P/M/v, unknown name, deadlock)."""


class ConfigError(PipeauditError):
    """Invalid options or configuration (thresholds, baselines, option combinations)."""
