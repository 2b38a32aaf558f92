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
3. **The cut.** The trace ends at ``t_end``, the latest start among the recovered complete
   events. Events that end after ``t_end`` are dropped (their children after the cut are
   lost, so their contents are incomplete), and so is every ``ProfilerStep#N`` span that
   is not complete: a step is complete when its span ends at or before ``t_end`` and, on
   GPU traces, every kernel launched inside it was recovered. Only a prefix of steps is
   kept: the first incomplete step and everything after it are excluded. A trace whose
   first step is already incomplete cannot be salvaged (an error says so).
4. **The run.** :func:`align_steps` excludes the same steps on every rank of the set (the
   last step complete on *all* salvaged ranks is the last step audited), so a step cut on
   one rank is never audited as if whole on the others.

Each salvaged rank carries a :class:`SalvageReport` (``RankTrace.salvage``): what was
wrong, bytes read, events recovered, where the trace ends and which steps were excluded;
the audit turns it into a ``TRUNCATED_TRACE`` finding and the JSON report lists it.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from pipeaudit.errors import TraceError
from pipeaudit.trace.source import GZIP_MAGIC, os_problem

if TYPE_CHECKING:  # pragma: no cover
    from pipeaudit.trace.model import RankTrace

#: Problems (the start of :attr:`TraceError.problem`) that ``--salvage`` can do something about.
SALVAGEABLE_PREFIXES: tuple[str, ...] = (
    "truncated JSON", "truncated gzip", "invalid JSON",
    "corrupt gzip data (garbage after the compressed stream)",
)

#: The hint added to a salvageable error when salvage was not asked for.
SALVAGE_HINT = "pass --salvage to analyse the complete events before the damage"

#: Header key of the partial traces the harness writes for failed ranks (the step that failed).
PARTIAL_KEY = "pipeaudit_incomplete_step"

_PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")
#: gzip damage after complete members (which passed their checksum): safe to salvage.
GARBAGE_AFTER = "corrupt gzip data (garbage after the compressed stream)"
_GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset")
_WS = b" \t\r\n"


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


# --------------------------------------------------------------------------- structure


@dataclass
class Scan:
    """Where the parts of a (damaged) trace document are in its bytes."""

    prefix: bytes  #: raw members before ``"traceEvents"`` (each complete), with trailing comma
    events: list[tuple[int, int]]  #: (start, end) byte ranges of complete top-level objects
    trailer: list[bytes]  #: complete members after the closed array
    array_closed: bool
    damage_at: int | None  #: first byte that could not be used (None: reached the end)


def _real_quotes(a: np.ndarray, data: bytes) -> np.ndarray:
    """Positions of the quotes that start or end JSON strings (escaped quotes removed)."""
    q = np.flatnonzero(a == 34)
    if q.size == 0:
        return q
    maybe = q[(q > 0) & (a[np.maximum(q - 1, 0)] == 92)]
    if maybe.size == 0:
        return q
    escaped = []
    for p in maybe.tolist():
        k = p - 1
        while k >= 0 and data[k] == 92:
            k -= 1
        if (p - 1 - k) % 2 == 1:
            escaped.append(p)
    return np.setdiff1d(q, np.asarray(escaped, dtype=q.dtype), assume_unique=True) if escaped else q


def _skip_ws(data: bytes, i: int) -> int:
    n = len(data)
    while i < n and data[i] in _WS:
        i += 1
    return i


def scan(data: bytes) -> Scan | None:
    """Find the ``traceEvents`` array of a JSON object and its complete objects.

    Returns None when the text is not an object with a ``traceEvents`` array that starts
    before the damage (nothing to recover).
    """
    a = np.frombuffer(data, dtype=np.uint8)
    quotes = _real_quotes(a, data)
    structural = np.flatnonzero((a == 123) | (a == 125) | (a == 91) | (a == 93))
    outside = (np.searchsorted(quotes, structural) % 2) == 0
    st = structural[outside]
    if st.size == 0:
        return None
    ch = a[st]
    depth = np.cumsum(np.where((ch == 123) | (ch == 91), 1, -1))

    first = _skip_ws(data, 0)
    if first >= len(data) or data[first] != 123 or st[0] != first:
        return None

    # the "traceEvents" key at depth 1, followed by ':' and '['
    arr_idx = None
    key_pos = -1
    pos = data.find(b'"traceEvents"')
    while pos >= 0:
        qi = int(np.searchsorted(quotes, pos))
        si = int(np.searchsorted(st, pos))  # structural chars before the key
        if qi < quotes.size and quotes[qi] == pos and qi % 2 == 0 and si > 0 and depth[si - 1] == 1:
            j = _skip_ws(data, pos + len(b'"traceEvents"'))
            if j < len(data) and data[j] == 58:  # ':'
                j = _skip_ws(data, j + 1)
                if j < len(data) and data[j] == 91 and si < st.size and st[si] == j:
                    arr_idx, key_pos = si, pos
                    break
        pos = data.find(b'"traceEvents"', pos + 1)
    if arr_idx is None:
        return None

    arr_pos = int(st[arr_idx])
    after = depth[arr_idx + 1:]
    closes = np.flatnonzero(after <= 1)
    end_idx = arr_idx + 1 + int(closes[0]) if closes.size else st.size  # index of the closing ']'
    inner = slice(arr_idx + 1, end_idx)
    ist, ich, idepth = st[inner], ch[inner], depth[inner]
    starts = ist[(ich == 123) & (idepth == 3)]
    ends = ist[(ich == 125) & (idepth == 2)]
    n_complete = min(starts.size, ends.size)

    events: list[tuple[int, int]] = []
    damage_at: int | None = None
    prev = arr_pos + 1
    for i in range(n_complete):
        s, e = int(starts[i]), int(ends[i])
        gap = data[prev:s].strip(_WS)
        if gap not in ((b"",) if i == 0 else (b",",)) or e < s:
            damage_at = prev
            break
        events.append((s, e + 1))
        prev = e + 1

    array_closed = closes.size > 0 and damage_at is None
    trailer: list[bytes] = []
    if array_closed:
        close_pos = int(st[end_idx])
        if data[prev:close_pos].strip(_WS):
            damage_at, array_closed = prev, False
        else:
            trailer, damage_at = _trailer(data, close_pos + 1)
    prefix = data[first + 1:key_pos]
    return Scan(prefix=prefix, events=events, trailer=trailer, array_closed=array_closed,
                damage_at=damage_at)


def _trailer(data: bytes, pos: int) -> tuple[list[bytes], int | None]:
    """Complete top-level members after the array (e.g. ``"traceName"``)."""
    members: list[bytes] = []
    i = _skip_ws(data, pos)
    n = len(data)
    while i < n and data[i] == 44:  # ','
        j = i + 1
        depth = 0
        in_str = False
        k = j
        while k < n:
            c = data[k]
            if in_str:
                if c == 92:
                    k += 2
                    continue
                if c == 34:
                    in_str = False
            elif c == 34:
                in_str = True
            elif c in (123, 91):
                depth += 1
            elif c in (125, 93):
                if depth == 0:
                    break
                depth -= 1
            elif c == 44 and depth == 0:
                break
            k += 1
        if k >= n or in_str:
            return members, i  # the member runs into the damage
        members.append(data[j:k].strip(_WS))
        i = k
    if i < n and data[i] == 125:
        tail = data[i + 1:].strip(_WS)
        return members, (i + 1 if tail else None)
    return members, (i if i < n else None)


def rebuild(data: bytes, sc: Scan, keep: int, trailer: Sequence[bytes]) -> tuple[bytes, list[int]]:
    """A well-formed document of the prefix, the first ``keep`` events and ``trailer``;
    also the offset of each event in it."""
    head = b"{" + sc.prefix + b'"traceEvents":['
    parts = [head]
    offsets: list[int] = []
    at = len(head)
    for i, (s, e) in enumerate(sc.events[:keep]):
        if i:
            parts.append(b",")
            at += 1
        offsets.append(at)
        parts.append(data[s:e])
        at += e - s
    parts.append(b"]")
    for m in trailer:
        parts.append(b"," + m)
    parts.append(b"}")
    return b"".join(parts), offsets


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
        from pipeaudit.trace.diagnose import repair_utf8

        text, count = repair_utf8(text)
        if notes is not None:
            notes.append(f"{count} invalid UTF-8 byte sequences in strings replaced by U+FFFD")
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
    header = [k for k in re.findall(rb'"([A-Za-z_]\w*)"\s*:', sc.prefix)] if sc.prefix else []
    report = SalvageReport(
        path=str(path), damage=damage, size_bytes=size, bytes_read=used,
        json_bytes=len(text),
        events_recovered=keep, last_start_ns=last_ns,
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


def _top_keys(tf: Any) -> list[str]:
    from pipeaudit.trace.schema import HEADER_KEYS

    return [k for k in HEADER_KEYS if getattr(tf, k, None) is not None]


# --------------------------------------------------------------------------- the cut


def _step_table(events):
    import polars as pl

    return (
        events.with_row_index("_row")
        .filter(pl.col("name").str.contains(_PROFILER_STEP.pattern))
        .select("_row", n=pl.col("name").str.extract(_PROFILER_STEP.pattern, 1).cast(pl.Int64),
                start="ts", end=pl.col("ts") + pl.col("dur"))
        .sort("n")
    )


def apply_cut(rt: "RankTrace", report: SalvageReport) -> None:
    """Cut a salvaged rank at the damage: drop spans that end after the trace does and
    every incomplete step (see the module docstring). Mutates ``rt``; raises TraceError
    when no complete event or no complete step survives."""
    import polars as pl

    ev = rt.events
    report.rank = rt.rank
    if ev.height == 0:
        raise TraceError(rt.path, f"{report.damage}; --salvage recovered {report.events_recovered:,} "
                                  "events but no complete event (ph X) among them")
    end = int(ev["ts"].max())  # type: ignore[arg-type]
    if report.last_start_ns is not None and report.last_start_ns > end:
        end = report.last_start_ns
    report.end_ns = end
    report.start_ns = int(ev["ts"].min())  # type: ignore[arg-type]
    steps = _step_table(ev)
    report.steps_found = sorted(set(steps["n"].to_list()))
    if report.all_events:  # the damage is after the events: nothing was lost
        report.last_complete_step = report.steps_found[-1] if report.steps_found else None
        rt.salvage = report
        rt.warnings.append(report.describe())
        return
    complete = (steps["end"] <= end).to_list()
    on_gpu = bool(ev["cat"].is_in(list(_GPU_CATEGORIES)).any())
    if on_gpu and steps.height:
        gpu_corr = ev.filter(pl.col("cat").is_in(list(_GPU_CATEGORIES)))["correlation"].drop_nulls()
        launches = ev.filter((pl.col("cat") == "cuda_runtime") & pl.col("name").str.contains("Launch")
                             & pl.col("correlation").is_not_null())
        lost = launches.filter(~pl.col("correlation").is_in(gpu_corr.implode()))
        lost_ts = lost["ts"].to_numpy()
        for i, (s, e) in enumerate(steps.select("start", "end").iter_rows()):
            if complete[i] and lost_ts.size and ((lost_ts >= s) & (lost_ts < e)).any():
                complete[i] = False
    kept_steps: list[int] = []
    for n, ok in zip(steps["n"].to_list(), complete):
        if not ok:
            break
        kept_steps.append(n)
    if steps.height and not kept_steps:
        first = steps.row(0, named=True)
        raise TraceError(
            rt.path,
            f"{report.damage}; --salvage recovered {report.events_recovered:,} events but no complete "
            f"step: the trace ends inside ProfilerStep#{first['n']} "
            f"({(end - first['start']) / 1e6:.3f} ms after it starts)",
        )
    report.last_complete_step = kept_steps[-1] if kept_steps else None
    report.excluded_steps = [n for n in report.steps_found if n not in set(kept_steps)]
    drop_rows = steps.filter(pl.col("n").is_in(report.excluded_steps))["_row"]
    cut = (ev["ts"] + ev["dur"]) > end
    report.events_cut = int(cut.sum())
    keep = ~cut
    if drop_rows.len():
        keep = keep & ~pl.Series(np.isin(np.arange(ev.height), drop_rows.to_numpy()))
    rt.events = ev.filter(keep)
    if rt.memory.height:
        rt.memory = rt.memory.filter(pl.col("ts") <= end)
    rt.salvage = report
    rt.warnings.append(report.describe())


def exclude_steps_after(rt: "RankTrace", last: int) -> list[int]:
    """Drop the ProfilerStep spans numbered above ``last``; return their numbers."""
    import polars as pl

    steps = _step_table(rt.events)
    gone = steps.filter(pl.col("n") > last)
    if gone.height:
        mask = np.isin(np.arange(rt.events.height), gone["_row"].to_numpy())
        rt.events = rt.events.filter(~pl.Series(mask))
    return sorted(set(gone["n"].to_list()))


def align_steps(ranks: Sequence["RankTrace"]) -> list[str]:
    """Exclude, on every rank, the steps after the last one complete on all salvaged ranks.

    Returns set-level warnings. Ranks are matched by ProfilerStep number (the harness and
    torch.profiler number steps alike on every rank)."""
    for rt in ranks:
        if rt.salvage is None and rt.header.get(PARTIAL_KEY) is not None:
            mark_partial(rt)
    salvaged = [rt for rt in ranks if getattr(rt, "salvage", None) is not None]
    lasts = [(rt.salvage.last_complete_step, rt) for rt in salvaged
             if rt.salvage.last_complete_step is not None]
    if not lasts:
        return []
    last, limiting = min(lasts, key=lambda x: x[0])
    others: list[int] = []  # ranks that held complete steps after ``last``
    for rt in ranks:
        gone = exclude_steps_after(rt, last)  # a rank's own cut steps are already gone
        if not gone:
            continue
        others.append(rt.rank)
        if rt.salvage is not None:
            rt.salvage.excluded_steps = sorted(set(rt.salvage.excluded_steps) | set(gone))
            rt.salvage.last_complete_step = last
    if not others:
        return []
    from pipeaudit.trace.validate import format_ranks

    why = "is partial" if limiting.salvage.kind == "partial" else "is damaged"
    return [f"steps after ProfilerStep#{last} are excluded on every rank: the trace of rank "
            f"{limiting.rank} ({limiting.path.name}) {why} after it (rank{'s' if len(others) > 1 else ''} "
            f"{format_ranks(others)} held later steps)"]


def mark_partial(rt: "RankTrace") -> None:
    """A partial trace the pipeaudit harness wrote for a rank that failed (or was stopped)
    during ``ProfilerStep#k`` (header ``pipeaudit_incomplete_step``): the file is intact, but
    step k and later are not. Excludes them like a salvaged cut; raises when k is the first."""
    k = rt.header.get(PARTIAL_KEY)
    if not (isinstance(k, int) and not isinstance(k, bool) and k >= 0):
        raise TraceError(rt.path, f"{PARTIAL_KEY} is {k!r}, expected an integer >= 0")
    steps = _step_table(rt.events)
    found = sorted(set(steps["n"].to_list()))
    kept = [n for n in found if n < k]
    if not kept:
        raise TraceError(rt.path, f"a partial trace: the harness stopped rank {rt.rank} during "
                                  f"ProfilerStep#{k}, before any step was complete")
    report = SalvageReport(
        path=str(rt.path), damage=f"a partial trace: the harness stopped rank {rt.rank} during "
                                  f"ProfilerStep#{k} (its run failed)",
        size_bytes=rt.size_bytes, bytes_read=rt.size_bytes, json_bytes=rt.size_bytes,
        events_recovered=rt.events.height, rank=rt.rank, kind="partial",
        start_ns=rt.start_ns, end_ns=rt.end_ns, steps_found=found, last_complete_step=kept[-1],
        all_events=True,
    )
    report.excluded_steps = exclude_steps_after(rt, kept[-1])
    rt.salvage = report
    rt.warnings.append(report.describe())


def salvage_summary(ranks: Sequence["RankTrace"]) -> list[SalvageReport]:
    """The reports of the salvaged ranks, by rank."""
    return [rt.salvage for rt in ranks if getattr(rt, "salvage", None) is not None]


__all__ = [
    "PARTIAL_KEY", "SALVAGEABLE_PREFIXES", "SALVAGE_HINT", "SalvageReport", "Scan", "align_steps",
    "apply_cut", "gunzip_partial", "is_salvageable", "mark_partial", "read_salvaged", "rebuild", "scan",
]
