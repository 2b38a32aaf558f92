"""Recover the complete events of a damaged trace file (``--salvage``, ``salvage=True``).

A job killed while torch.profiler writes its trace, or a full disk, leaves a file that
ends in the middle of the JSON document (or of the gzip stream). Everything before the
damage is usually intact: Kineto writes the header first (``distributedInfo``,
``baseTimeNanoseconds``, ...), then ``traceEvents`` in start-time order. Salvage keeps
exactly that:

1. **Bytes.** A truncated gzip stream is decompressed as far as it goes: deflate output is
   determined by the input before it, so that is exactly the start of the original JSON.
   Corrupt gzip data (a bad block, a checksum mismatch) is *not* salvaged: zlib notices
   corruption only some way after it, and what it produced in between may be garbage that
   still parses (a wrong digit in a ``ts``). Bytes after complete gzip members are ignored.
2. **Structure.** The JSON text is scanned for the ``traceEvents`` array and its complete
   top-level ``{...}`` objects, tracking strings, escapes and nesting (vectorised with
   numpy: about 0.1 s per 10 MB). The members written before the array are kept as they
   are; members after it are kept when complete. Scanning stops at the first byte that
   cannot belong to a well-formed array (garbage between events, an event that is not
   valid JSON): only events *before* the damage are recovered.
   (:mod:`pipeaudit.trace.jsonscan`)
3. **The cut.** :func:`pipeaudit.trace.cut.apply_cut` drops what the damage may have made
   incomplete: spans that end after the trace does and the steps it cut;
   :func:`pipeaudit.trace.cut.align_steps` excludes the same steps on every rank of the set,
   so a step cut on one rank is never audited as if whole on the others.

Each salvaged rank carries a :class:`SalvageReport` (``RankTrace.salvage``): what was
wrong, bytes read, events recovered, where the trace ends and which steps were excluded;
the audit turns it into a ``TRUNCATED_TRACE`` finding and the JSON report lists it.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pipeaudit.errors import TraceError
from pipeaudit.trace.jsonscan import Scan, rebuild, scan
from pipeaudit.trace.source import GZIP_MAGIC, os_problem

#: Problems (the start of :attr:`TraceError.problem`) that ``--salvage`` can do something about.
SALVAGEABLE_PREFIXES: tuple[str, ...] = (
    "truncated JSON", "truncated gzip", "invalid JSON",
    "corrupt gzip data (garbage after the compressed stream)",
)

#: The hint added to a salvageable error when salvage was not asked for.
SALVAGE_HINT = "pass --salvage to analyse the complete events before the damage"

#: gzip damage after complete members (which passed their checksum): safe to salvage.
GARBAGE_AFTER = "corrupt gzip data (garbage after the compressed stream)"


def is_salvageable(problem: str) -> bool:
    """True when ``problem`` (a TraceError's problem text) is damage that salvage may repair.

    Corrupt gzip data is not: zlib notices corruption only some way after it, and what it
    decompressed in between may be garbage that still parses (a wrong digit in a ``ts``)."""
    return problem.startswith(SALVAGEABLE_PREFIXES)


@dataclass
class SalvageReport:
    """What salvage did to one file (all times absolute ns, like ``RankTrace.events.ts``)."""

    path: str
    damage: str  #: the problem the normal reader reported
    size_bytes: int  #: the file's size on disk
    bytes_read: int  #: bytes of the file that were usable (compressed bytes for gzip)
    json_bytes: int  #: bytes of JSON text before the damage
    events_recovered: int  #: complete elements of ``traceEvents`` recovered
    header_kept: list[str] = field(default_factory=list)  #: top-level keys that survived
    rank: int | None = None
    last_start_ns: int | None = None  #: latest ts of any recovered event (instant ones too)
    order_lag_ns: int = 0  #: how far out of time order the file's events are (0: sorted)
    end_ns: int | None = None  #: the trace ends here: latest start of a recovered event
    start_ns: int | None = None  #: earliest event start of the salvaged rank
    events_cut: int = 0  #: recovered complete events dropped because they end after ``end_ns``
    steps_found: list[int] = field(default_factory=list)  #: ProfilerStep numbers recovered
    last_complete_step: int | None = None  #: last ProfilerStep kept (None: trace has no steps)
    excluded_steps: list[int] = field(default_factory=list)  #: ProfilerStep numbers excluded
    all_events: bool = False  #: the traceEvents array was complete (damage after it only)
    kind: str = "damaged"  #: "damaged" (read with salvage) or "partial" (a failed harness rank)

    @property
    def file_name(self) -> str:
        return Path(self.path).name

    def describe(self) -> str:
        """One line: damage, bytes, events, where the trace ends, what was excluded (no file name)."""
        read = (f"read {self.bytes_read:,} of {self.size_bytes:,} bytes ({self.json_bytes:,} bytes of JSON)"
                if self.bytes_read != self.json_bytes
                else f"read {self.json_bytes:,} of {self.size_bytes:,} bytes")
        if self.kind == "partial":
            text = f"{self.damage}; {self.events_recovered:,} complete events"
        else:
            text = (f"{self.damage}; --salvage {read} and recovered "
                    f"{self.events_recovered:,} complete events")
        if self.events_cut:
            text += f" ({self.events_cut:,} spans cut by the damage dropped)"
        if self.end_ns is not None:
            from pipeaudit.trace.clock import format_ns

            when = format_ns(self.end_ns) if self.end_ns > 10**18 else f"{self.end_ns / 1e9:.6f} s"
            rel = (self.end_ns - self.start_ns) / 1e9 if self.start_ns is not None else None
            text += f"; the trace ends at t={when}"
            if rel is not None:
                text += f" ({rel:.3f} s after its first event)"
            if self.order_lag_ns > 1_000_000:
                text += (f" as far as complete: its events are out of time order by up to "
                         f"{self.order_lag_ns / 1e6:.1f} ms")
        if self.last_complete_step is not None and self.excluded_steps:
            text += (f"; steps after ProfilerStep#{self.last_complete_step} are incomplete and excluded "
                     f"(ProfilerStep#{', #'.join(map(str, self.excluded_steps))})")
        elif self.last_complete_step is not None:
            text += (f"; every recovered step is complete (the last is ProfilerStep#"
                     f"{self.last_complete_step}); anything after it is lost")
        elif not self.steps_found:
            text += "; the trace has no ProfilerStep spans, so the step cut by the damage is audited " \
                    "as partial (see MISSING_ACTIONS)"
        return text

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["message"] = self.describe()
        return d


# --------------------------------------------------------------------------- bytes


def gunzip_partial(data: bytes) -> tuple[bytes, int, str | None]:
    """Decompress a possibly truncated gzip file as far as its stream goes.

    Returns ``(decompressed, compressed bytes used, problem or None)``. A truncated stream
    yields exactly the prefix of the original data (deflate output is determined by the
    input before it). Concatenated members are followed like :func:`~pipeaudit.trace.source.gunzip`;
    trailing bytes after complete members are ignored (their data passed the checksum). On
    corrupt data the problem says so: what was decompressed before zlib noticed may already be
    garbage, so callers must not trust it.
    """
    out: list[bytes] = []
    pos = 0
    n = len(data)
    while pos < n:
        if not data.startswith(GZIP_MAGIC, pos):
            if GZIP_MAGIC.startswith(data[pos:]):  # a member header cut after its first byte
                return b"".join(out), n, "truncated gzip file (the compressed stream ends early)"
            if out and not data[pos:].strip(b"\x00"):
                return b"".join(out), n, None
            return b"".join(out), pos, GARBAGE_AFTER
        d = zlib.decompressobj(wbits=31)
        try:
            out.append(d.decompress(data[pos:]))
        except zlib.error as exc:
            return b"".join(out), pos, f"corrupt gzip data ({exc})"
        if not d.eof:
            return b"".join(out), n, "truncated gzip file (the compressed stream ends early)"
        pos = n - len(d.unused_data)
    return b"".join(out), n, None


# --------------------------------------------------------------------------- files


def read_salvaged(path: Path, notes: list[str] | None = None) -> tuple[Any, int, SalvageReport | None]:
    """Parse ``path`` like the normal reader; when it is damaged in a salvageable way,
    recover its complete events instead. Returns ``(TraceFile, size on disk, report)``;
    the report is None for an intact file. Raises :class:`TraceError` otherwise."""
    from pipeaudit.trace.decode import _parse
    from pipeaudit.trace.source import read_bytes

    try:
        data, size, _gz = read_bytes(path)
        return _parse(path, data, notes), size, None
    except TraceError as exc:
        if exc.problem.startswith("corrupt gzip data") and not is_salvageable(exc.problem):
            raise TraceError(path, f"{exc.problem}: what decompresses before the damage cannot be "
                                   "verified, so nothing is salvaged") from None
        if not is_salvageable(exc.problem):
            raise
        damage = exc.problem
    return _salvage(path, damage, notes)


_BYTE_RE = re.compile(r"\(byte (\d+)\)")


def _salvage(path: Path, damage: str, notes: list[str] | None = None) -> tuple[Any, int, SalvageReport]:
    import msgspec

    from pipeaudit.trace.decode import _parse
    from pipeaudit.trace.schema import TRACE_DECODER

    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:  # pragma: no cover - it was readable a moment ago
        raise TraceError(path, os_problem(exc)) from None
    size = len(raw)
    used = size
    if raw.startswith(GZIP_MAGIC):
        text, used, gz_problem = gunzip_partial(raw)
        if gz_problem and not is_salvageable(gz_problem):
            raise TraceError(path, f"{gz_problem}: what decompresses before the damage cannot be "
                                   "verified, so nothing is salvaged")
    else:
        text = raw
    if text.startswith(b"\xef\xbb\xbf"):
        text = text[3:]
    try:
        text.decode("utf-8")
    except UnicodeDecodeError:
        from pipeaudit.trace.diagnose import repair_utf8, utf8_repair_note

        text, count = repair_utf8(text)
        if notes is not None:
            notes.append(utf8_repair_note(count))
    sc = scan(text)
    where = f"the usable data ends at byte {len(text):,}"
    if sc is None:
        raise TraceError(path, f"{damage}; --salvage found nothing to recover ({where}, before "
                               "the traceEvents array starts)")
    keep = len(sc.events)
    trailer = list(sc.trailer)
    while True:
        doc, offsets = rebuild(text, sc, keep, trailer)
        try:
            TRACE_DECODER.decode(doc)
            break
        except msgspec.ValidationError:
            _parse(path, doc)  # raises the normal, precise message (a wrong type is not damage)
            raise  # pragma: no cover
        except msgspec.DecodeError as exc:
            m = _BYTE_RE.search(str(exc))
            bad = int(m.group(1)) if m else len(doc)
            if offsets and bad >= offsets[0] and keep:
                # drop the event holding the bad byte and everything after it
                idx = int(np.searchsorted(np.asarray(offsets), bad, side="right")) - 1
                if idx < keep:
                    keep = idx
                    trailer = []
                    continue
            if trailer:
                trailer = trailer[:-1]
                continue
            raise TraceError(path, f"{damage}; --salvage cannot rebuild a valid document "
                                   f"({str(exc).replace('JSON is malformed: ', '')})") from None
    if keep == 0:
        raise TraceError(path, f"{damage}; --salvage found no complete event ({where}, before "
                               "the first event ends)")
    tf = _parse(path, doc)
    last_ns = _last_start_ns(tf)
    lag_ns = _order_lag_ns(tf)
    header = [k for k in re.findall(rb'"([A-Za-z_]\w*)"\s*:', sc.prefix)] if sc.prefix else []
    report = SalvageReport(
        path=str(path), damage=damage, size_bytes=size, bytes_read=used,
        json_bytes=len(text),
        events_recovered=keep, last_start_ns=last_ns, order_lag_ns=lag_ns,
        all_events=sc.array_closed and keep == len(sc.events),
        header_kept=sorted({h.decode() for h in header} & set(_top_keys(tf))),
    )
    return tf, size, report


def _last_start_ns(tf: Any) -> int | None:
    """Latest ``ts`` (absolute ns) of any recovered event: instant and metadata events count
    too (Kineto writes ``Record Window End`` after the last complete event)."""
    from pipeaudit.trace.timestamps import raw_to_ns

    ns, _ = raw_to_ns([e.ts for e in tf.traceEvents])
    last = ns.max()
    if last is None:
        return None
    base = tf.baseTimeNanoseconds
    try:
        base = int(base) if base is not None else 0
    except (TypeError, ValueError):
        base = 0
    return int(last) + base  # type: ignore[arg-type]


def _order_lag_ns(tf: Any) -> int:
    """How far out of start-time order the recovered complete events are in the file: the
    largest step back in ``ts`` (ns) from the latest start seen before. 0 when sorted (what
    torch.profiler writes); large for files grouped by thread or by CPU/GPU. Kineto's own
    whole-profile span (cat ``Trace``) is left out: it comes last but starts first."""
    from pipeaudit.trace.timestamps import raw_to_ns

    raws = [e.ts for e in tf.traceEvents if e.ph == "X" and e.cat not in ("Trace", "python_function")]
    if len(raws) < 2:
        return 0
    ns = raw_to_ns(raws)[0].drop_nulls().to_numpy()
    if ns.size < 2:
        return 0
    return int((np.maximum.accumulate(ns) - ns).max())


def _top_keys(tf: Any) -> list[str]:
    from pipeaudit.trace.schema import HEADER_KEYS

    return [k for k in HEADER_KEYS if getattr(tf, k, None) is not None]


_MOVED_TO_CUT = ("PARTIAL_KEY", "align_steps", "apply_cut", "exclude_steps_after", "mark_partial")


def __getattr__(name: str):
    """Names that moved to :mod:`pipeaudit.trace.cut` are still importable from here."""
    if name in _MOVED_TO_CUT:
        from pipeaudit.trace import cut

        return getattr(cut, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "SALVAGEABLE_PREFIXES", "SALVAGE_HINT", "SalvageReport", "Scan", "gunzip_partial",
    "is_salvageable", "read_salvaged", "rebuild", "scan",
]
