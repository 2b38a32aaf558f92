"""Recover the complete events of a damaged trace file (``--salvage``, ``salvage=True``).

A job killed while torch.profiler writes its trace, or a full disk, leaves a file that
ends in the middle of the JSON document (or of the gzip stream). Everything before the
damage is usually intact: Kineto writes the header first (``distributedInfo``,
``baseTimeNanoseconds``, ...), then ``traceEvents`` in start-time order. Salvage keeps
exactly that:

1. **Bytes.** The byte reader's tolerant mode (:class:`pipeaudit.trace.source.TraceBytes`)
   decompresses a truncated gzip stream as far as it goes: deflate output is determined by
   the input before it, so that is exactly the start of the original JSON. Corrupt gzip data
   (a bad block, a checksum mismatch) is *not* salvaged: zlib notices corruption only some
   way after it, and what it produced in between may be garbage that still parses (a wrong
   digit in a ``ts``). Bytes after complete gzip members are ignored. The whole JSON text is
   held at once, within a share of the memory budget (:class:`pipeaudit.trace.options.ReadOptions`).
2. **Structure.** The JSON text is scanned for the ``traceEvents`` array and its complete
   top-level ``{...}`` objects, tracking strings, escapes and nesting (vectorised with
   numpy: about 0.1 s per 10 MB). The members written before the array are kept as they
   are; members after it are kept when complete. Scanning stops at the first byte that
   cannot belong to a well-formed array (garbage between events, an event that is not
   valid JSON): only events *before* the damage are recovered.
   (:mod:`pipeaudit.trace.jsonscan`)
   The rebuilt document is then read by the same pipeline as any file
   (:func:`pipeaudit.trace.decode.decode_file`), so its events are checked by the same rules.
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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from pipeaudit.errors import TraceError, TraceErrorKind as Kind
from pipeaudit.trace.diagnose import NESTED, msgspec_byte
from pipeaudit.trace.jsonscan import rebuild, scan
from pipeaudit.trace.model import RankTrace
from pipeaudit.trace.timestamps import raw_to_ns

#: The hint added to a salvageable error when salvage was not asked for.
SALVAGE_HINT = "pass --salvage to analyse the complete events before the damage"


def is_salvageable(error: TraceError) -> bool:
    """True when ``error`` is damage that salvage may repair: routed on its kind
    (:data:`pipeaudit.errors.SALVAGEABLE_KINDS`), never on its wording.

    Corrupt gzip data is not: zlib notices corruption only some way after it, and what it
    decompressed in between may be garbage that still parses (a wrong digit in a ``ts``)."""
    return error.salvageable


def unverifiable(error: TraceError) -> TraceError:
    """The error for corrupt gzip data when salvage was asked for."""
    return TraceError(error.path, f"{error.problem}: what decompresses before the damage cannot be "
                                  "verified, so nothing is salvaged", error.kind)


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
    #: how steps are named: "ProfilerStep#" or, for traces without step marks whose steps are
    #: counted by their ``Optimizer.step#`` spans, "optimizer step #"
    step_label: str = "ProfilerStep#"

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
            label = self.step_label
            text += (f"; steps after {label}{self.last_complete_step} are incomplete and excluded "
                     f"({label}{', #'.join(map(str, self.excluded_steps))})")
        elif self.last_complete_step is not None:
            text += (f"; every recovered step is complete (the last is {self.step_label}"
                     f"{self.last_complete_step}); anything after it is lost")
        elif not self.steps_found:
            text += "; the trace has no ProfilerStep spans, so the step cut by the damage is audited " \
                    "as partial (see MISSING_ACTIONS)"
        return text

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["message"] = self.describe()
        return d


# --------------------------------------------------------------------------- the events

_RAW = msgspec.json.Decoder(msgspec.Raw)
_HEADER_KEY = re.compile(rb'"([A-Za-z_]\w*)"\s*:')


def recover(path: Path, text: bytes, damage: str, *, size: int, used: int) -> tuple[bytes, SalvageReport]:
    """A well-formed document of the complete events of the damaged JSON ``text`` (and the
    header members before them, the complete ones after), and the report of what was
    recovered. ``size``: the file's size on disk; ``used``: its bytes that were read."""
    sc = scan(text)
    where = f"the usable data ends at byte {len(text):,}"
    if sc is None:
        raise TraceError(path, f"{damage}; --salvage found nothing to recover ({where}, before "
                               "the traceEvents array starts)", Kind.SALVAGE_FAILED)
    keep = len(sc.events)
    trailer = list(sc.trailer)
    while True:
        doc, offsets = rebuild(text, sc, keep, trailer)
        try:
            _RAW.decode(doc)
            break
        except RecursionError:
            raise TraceError(path, f"{damage}; --salvage cannot read it: {NESTED}", Kind.TOO_DEEP) from None
        except msgspec.DecodeError as exc:
            at = msgspec_byte(str(exc))
            bad = at if at is not None else len(doc)
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
                                   f"({str(exc).replace('JSON is malformed: ', '')})",
                             Kind.SALVAGE_FAILED) from None
    if keep == 0:
        raise TraceError(path, f"{damage}; --salvage found no complete event ({where}, before "
                               "the first event ends)", Kind.SALVAGE_FAILED)
    report = SalvageReport(
        path=str(path), damage=damage, size_bytes=size, bytes_read=used, json_bytes=len(text),
        events_recovered=keep, all_events=sc.array_closed and keep == len(sc.events),
        header_kept=sorted({k.decode() for k in _HEADER_KEY.findall(sc.prefix)}),
    )
    return doc, report


class _Timed(msgspec.Struct, gc=False):
    ph: Any = None
    cat: Any = None
    ts: msgspec.Raw = msgspec.Raw(b"")


class _TimedFile(msgspec.Struct, gc=False):
    traceEvents: list[_Timed]


def complete_report(report: SalvageReport, doc: bytes, rt: RankTrace) -> None:
    """Fill in what needs the decoded rank: the latest start of any recovered event
    (instant and metadata events count too: Kineto writes ``Record Window End`` after the
    last complete event), how far out of start-time order the file is, and which header
    members survived."""
    events = msgspec.json.decode(doc, type=_TimedFile).traceEvents
    ns, _ = raw_to_ns([e.ts for e in events])
    last = ns.max()
    report.last_start_ns = None if last is None else int(last) + rt.base_ns  # type: ignore[arg-type]
    report.order_lag_ns = _order_lag_ns(events)
    report.header_kept = sorted(set(report.header_kept) & set(rt.header))


def _order_lag_ns(events: list[_Timed]) -> int:
    """How far out of start-time order the recovered complete events are in the file: the
    largest step back in ``ts`` (ns) from the latest start seen before. 0 when sorted (what
    torch.profiler writes); large for files grouped by thread or by CPU/GPU. Kineto's own
    whole-profile span (cat ``Trace``) is left out: it comes last but starts first."""
    raws = [e.ts for e in events if e.ph == "X" and e.cat not in ("Trace", "python_function")]
    if len(raws) < 2:
        return 0
    ns = raw_to_ns(raws)[0].drop_nulls().to_numpy()
    if ns.size < 2:
        return 0
    return int((np.maximum.accumulate(ns) - ns).max())


__all__ = ["SALVAGE_HINT", "SalvageReport", "complete_report", "is_salvageable", "recover",
           "unverifiable"]
