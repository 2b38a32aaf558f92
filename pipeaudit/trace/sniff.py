"""Whether a trace-named file in a directory holds a trace, judged from its first bytes, and
if not, why, in a few words (for the line that names every candidate a directory scan could
not take, see :mod:`pipeaudit.trace.discover`)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path

from pipeaudit.errors import TraceError
from pipeaudit.trace import diagnose
from pipeaudit.trace.source import TraceBytes

SNIFF_BYTES = 64 * 1024
_SNIFF_KEYS = (b'"traceEvents"', b'"schemaVersion"', b'"distributedInfo"', b'"deviceProperties"',
               b'"baseTimeNanoseconds"', b'"displayTimeUnit"')


class Verdict(enum.Enum):
    """What a file's first bytes say it is."""

    TRACE = "trace"  #: a JSON object that mentions a Chrome-trace key
    UNREADABLE = "unreadable"  #: its bytes cannot be read: reading it says what is wrong
    OTHER = "other"  #: readable, and not a trace


@dataclass(frozen=True)
class Sniff:
    """The verdict on one file, and why it is not a trace."""

    verdict: Verdict
    #: why it is not a trace (None for a trace)
    reason: str | None = None
    #: UNREADABLE only: damage ``--salvage`` may repair (a cut gzip stream)
    salvageable: bool = False


def sniff(path: Path) -> Sniff:
    """The verdict on ``path`` from its first :data:`SNIFF_BYTES` (decompressed when gzip)."""
    tb = TraceBytes(path)
    try:
        head = tb.head(SNIFF_BYTES)
    except TraceError as exc:
        return Sniff(Verdict.UNREADABLE, exc.problem, exc.salvageable)
    text = head.lstrip(b" \t\r\n")
    if text.startswith(b"{"):
        if any(k in text for k in _SNIFF_KEYS):
            return Sniff(Verdict.TRACE)
        return Sniff(Verdict.OTHER, f"JSON, but no traceEvents in its first {SNIFF_BYTES // 1024} KiB")
    return Sniff(Verdict.OTHER, _not_json(head, path.name, tb.gzip))


def _not_json(head: bytes, name: str, gzip: bool) -> str:
    if not head.strip(b" \t\r\n"):
        return "only whitespace"
    if not head.strip(b"\x00"):
        return "only zero bytes"
    what = next((w for magic, w, _ in diagnose.OTHER_COMPRESSORS if head.startswith(magic)), None)
    if what is not None:
        return what
    if diagnose.encoding_problem(head):
        return "JSON in UTF-16 or UTF-32, not UTF-8"
    if not gzip and diagnose.gz_name(name):
        return "not gzip, nor JSON"
    return "not JSON"
