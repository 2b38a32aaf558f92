"""The structure of a trace document, read as it streams: the top-level members, and the
``traceEvents`` array cut into batches of whole events.

A trace is one JSON object: small members (``distributedInfo``, ``baseTimeNanoseconds``,
...) before and after a ``traceEvents`` array that holds almost every byte. :class:`Document`
reads the text from the byte reader (:class:`~pipeaudit.trace.source.TraceBytes`) in one
pass and in bounded memory:

* **the top level** is parsed here, member by member; a member's value is delimited and
  checked by msgspec (as raw JSON) and kept when its key is asked for. A value larger than
  ``max_event_bytes`` is refused, so no buffer grows with the file.
* **the events** are handed to a :class:`BatchTarget` in batches of about ``batch_bytes``
  that end at an event boundary. A cut is tried at the last ``}`` followed by ``,`` or
  ``]`` (any whitespace between) within the batch size; only the target can tell whether
  the cut closes an event (a ``}`` may sit in a string or in nested ``args``): if it does
  not, the target raises :class:`NotABoundary` and the previous candidate is tried, then a
  bigger batch, up to ``max_event_bytes`` for one event.
* **whitespace** between tokens is skipped by regular expression, chunk by chunk, without
  keeping it: a gigabyte of spaces costs what reading it costs.

Errors (:class:`~pipeaudit.errors.TraceError`, with their kind) are worded here for
everything structural (truncation, syntax, nesting, size, a file that is not an object with
``traceEvents``) and name byte offsets of the file's JSON text. The rules that are the same
for every batch size hold by construction: there is one path, and a file read in batches
of 1 byte and one read at once go through the same code.

A key repeated at the top level is an error (which copy describes the trace cannot be
known); inside events the tokenizer's rule applies (the last value counts).
"""

from __future__ import annotations

import mmap
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NoReturn, Protocol

import msgspec

from pipeaudit.errors import TraceError, TraceErrorKind as Kind
from pipeaudit.trace import diagnose
from pipeaudit.trace.source import READ_BYTES, TraceBytes

#: Cut candidates tried before the batch is made bigger (each failure costs a decode).
MAX_CUT_TRIES = 4
#: Text read beyond a batch's size before it is cut: what tells a ``}`` that ends an event
#: (whitespace, then ``,`` or ``]``). What is read beyond the cut is copied again into the
#: next batch, so this stays small (the decompressed chunks are 1 MiB: at most that much more).
CUT_LOOKAHEAD = 64 << 10

#: A mapped file's read pages are given back (``madvise``) by this many bytes at least.
_RELEASE_BYTES = 4 << 20
_DONTNEED = getattr(mmap, "MADV_DONTNEED", None)
_NON_WS = re.compile(rb"[^ \t\r\n]")
_CUT = re.compile(rb"\}(?=[ \t\r\n]*(?:[,\]]|\Z))")  # \Z: whitespace to the end of what is read
_CUT_AT_END = re.compile(rb"\}(?=[ \t\r\n]*[,\]])")  # when the text ends there too
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_WS = b" \t\r\n"
_RAW = msgspec.json.Decoder(msgspec.Raw)
_KEY = msgspec.json.Decoder(str)


@dataclass
class Batch:
    """Complete events separated by commas: ``data`` (no brackets), the ``traceEvents``
    index of its first event, and the text offset of ``data[0]``."""

    data: memoryview | bytes
    index: int
    offset: int


class NotABoundary(Exception):
    """The batch does not end at an event's end: try a shorter one."""


class ArrayEnds(Exception):
    """The ``traceEvents`` array closes inside the batch, at ``data[pos]``."""

    def __init__(self, pos: int) -> None:
        super().__init__(pos)
        self.pos = pos


class Malformed(Exception):
    """A syntax error at ``data[pos]`` of the batch (``reason``: msgspec's words)."""

    def __init__(self, pos: int, reason: str) -> None:
        super().__init__(pos, reason)
        self.pos, self.reason = pos, reason


class Truncated(Exception):
    """The batch (the rest of the file) ends inside an event."""


class TooDeep(Exception):
    """Nested deeper than the decoder goes."""


class BatchTarget(Protocol):
    """Decodes batches of events (see :mod:`pipeaudit.trace.tokenizer`)."""

    def decode(self, batch: Batch) -> int:
        """Decode ``batch``; return its number of events. Raises :class:`NotABoundary`,
        :class:`ArrayEnds`, :class:`Malformed`, :class:`TooDeep` or a TraceError."""

    def explain(self, batch: Batch) -> NoReturn:
        """``batch`` holds no event boundary up to its end: raise what is wrong with it
        (:class:`Truncated` when nothing is, so far)."""


def _first_non_ws(data: bytes, start: int) -> int | None:
    """Index of the first non-whitespace byte of ``data[start:]``: a short run by regular
    expression, a long one a megabyte at a time (``bytes.translate`` runs at about 1 GB/s,
    six times the expression)."""
    m = _NON_WS.search(data, start, start + 4096)
    if m is not None:
        return m.start()
    pos = start + 4096
    while pos < len(data):
        end = pos + (1 << 20)
        if data[pos:end].translate(None, _WS):
            return _NON_WS.search(data, pos, end).start()  # type: ignore[union-attr]
        pos = end
    return None


def all_zeros(data: bytes) -> bool:
    """True when every byte of ``data`` is zero (at about 1 GB/s)."""
    return not data.translate(None, b"\x00")


class _Buffer:
    """The text as a sliding window: ``data[start:]`` is unread and ``data[0]`` is text
    offset ``offset``. Read bytes are dropped when more are read."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self.chunks = chunks
        self.data = b""
        self.start = 0
        self.offset = 0
        self.eof = False
        self._released = 0  # of a mapped file: the pages before it are given back

    @property
    def live(self) -> int:
        return len(self.data) - self.start

    def release_read(self) -> None:
        """A mapped file's pages before ``start`` leave this process's resident memory (the
        page cache keeps them; a page read again comes back from there): the mapping holds
        about one batch, not the whole file."""
        data = self.data
        if not isinstance(data, mmap.mmap) or _DONTNEED is None:
            return
        upto = self.start - self.start % mmap.PAGESIZE
        if upto - self._released >= _RELEASE_BYTES:
            data.madvise(_DONTNEED, self._released, upto - self._released)
            self._released = upto

    def fill(self, size: int) -> None:
        """Read until ``size`` unread bytes are held or the text ends (indices into ``data``
        must be taken again after this)."""
        if self.live >= size or self.eof:
            return
        if not self.live:  # nothing held: the next chunk as it is (a mapped file: all of it)
            self.offset += len(self.data)
            self.data, self.start = next(self.chunks, None), 0
            if self.data is None:
                self.data, self.eof = b"", True
            if self.live >= size:
                return
        parts = [self.data[self.start:]]
        have = self.live
        while have < size:
            chunk = next(self.chunks, None)
            if chunk is None:
                self.eof = True
                break
            parts.append(chunk)
            have += len(chunk)
        self.offset += self.start
        self.data = b"".join(parts)
        self.start = 0

    def skip_ws(self) -> bool:
        """Move ``start`` to the next non-whitespace byte; False at the end of the text.
        Whitespace is dropped as it is read, never kept."""
        while True:
            pos = _first_non_ws(self.data, self.start)
            if pos is not None:
                self.start = pos
                return True
            self.offset += len(self.data)
            self.data, self.start = b"", 0
            if self.eof:
                return False
            chunk = next(self.chunks, None)
            if chunk is None:
                self.eof = True
                return False
            self.data = chunk


class Document:
    """One pass over a trace document (see the module docstring).

    :meth:`read` hands every batch of events to ``target`` and returns the top-level
    members named in ``keep`` as raw JSON text; :attr:`n_events` counts the events."""

    def __init__(self, text: TraceBytes, target: BatchTarget, *, batch_bytes: int,
                 max_event_bytes: int, keep: frozenset[str] = frozenset()) -> None:
        self.text = text
        self.path = text.path
        self.target = target
        self.batch_bytes = max(1, batch_bytes)
        self.max_event = max(self.batch_bytes, max_event_bytes)
        self.keep = keep
        self.members: dict[str, bytes] = {}
        self.n_events = 0
        self._keys: set[str] = set()
        self._closed = False
        self.buf = _Buffer(text.chunks())

    # ------------------------------------------------------------------ errors

    def at(self, index: int) -> int:
        """The file's byte offset of ``buf.data[index]``."""
        return self.text.original_offset(self.buf.offset + index)

    def error(self, problem: str, kind: Kind) -> TraceError:
        return TraceError(self.path, problem, kind)

    def truncated(self) -> TraceError:
        return self.error(diagnose.TRUNCATED, Kind.JSON_TRUNCATED)

    def syntax(self, index: int, reason: str, batch: Batch | None = None) -> TraceError:
        """A syntax error at ``buf.data[index]`` (worded: NaN, zeros, or msgspec's reason)."""
        data, at = self.buf.data, self.at(index)
        if batch is not None:
            pos = self.buf.offset + index - batch.offset
            problem = diagnose.non_finite_problem(batch.data, pos, at, batch.index)
            if problem is not None:
                return self.error(problem, Kind.BAD_VALUE)
        if data[index:index + 1] == b"\x00":
            zeros = self._zeros_to_end(index)
            if zeros is not None:
                return self.error(diagnose.zeros_problem(zeros, at), Kind.JSON_INVALID)
            return self.error(diagnose.zero_byte_problem(at), Kind.JSON_INVALID)
        return self.error(diagnose.syntax_problem(reason, at), Kind.JSON_INVALID)

    def _zeros_to_end(self, index: int) -> int | None:
        """How many bytes from ``buf.data[index]`` to the end of the text, if all are zero
        (read at stream speed, nothing kept)."""
        buf = self.buf
        if not all_zeros(buf.data[index:]):
            return None
        count = len(buf.data) - index
        while not buf.eof:
            chunk = next(buf.chunks, None)
            if chunk is None:
                buf.eof = True
                break
            if not all_zeros(chunk):
                return None
            count += len(chunk)
        return count

    def _too_deep(self, where: str) -> TraceError:
        return self.error(f"{diagnose.NESTED}, in {where}", Kind.TOO_DEEP)

    # ------------------------------------------------------------------ top level

    def read(self) -> dict[str, bytes]:
        """Read the whole document (see the class docstring)."""
        buf = self.buf
        buf.fill(READ_BYTES)
        if not buf.skip_ws():
            raise self.error("empty file (only whitespace)", Kind.EMPTY)
        first = buf.start
        if buf.data[first] != 0x7B:  # '{'
            self._not_an_object(first)
        buf.start += 1
        self._members()
        if "traceEvents" not in self._keys:
            raise self.error("not a trace: the JSON object has no traceEvents", Kind.NOT_A_TRACE)
        if buf.skip_ws():
            i = buf.start
            if buf.data[i] == 0:
                raise self.syntax(i, "")
            raise self.error(diagnose.syntax_problem("trailing characters", self.at(i)),
                             Kind.JSON_INVALID)
        return self.members

    def _not_an_object(self, i: int) -> NoReturn:
        data = self.buf.data
        if data[i] == 0:
            zeros = self._zeros_to_end(i)
            if zeros is not None and i == 0:
                raise self.error(diagnose.zeros_problem(zeros, 0), Kind.NOT_JSON)
        kind = diagnose.first_value_kind(data, i)
        if kind is None:
            name = "" if self.text.gzip else self.text.path.name  # a .gz name that is no gzip
            raise self.error(diagnose.not_json(self.text.first_bytes, self.at(i), name),
                             Kind.NOT_JSON)
        raise self.error(f"not a trace: the JSON is {kind}, expected an object with traceEvents",
                         Kind.NOT_A_TRACE)

    def _next(self) -> int:
        """The next non-whitespace byte (at ``buf.start``); truncated at the end."""
        if not self.buf.skip_ws():
            raise self.truncated()
        return self.buf.data[self.buf.start]

    def _members(self) -> None:
        """The members of the top-level object, after its ``{``, to its ``}``."""
        buf = self.buf
        after_value = False
        while True:
            c = self._next()
            if c == 0x7D:  # '}'
                buf.start += 1
                return
            if after_value:
                if c != 0x2C:  # ','
                    raise self.syntax(buf.start, "expected ',' or '}'")
                buf.start += 1
                c = self._next()
                if c == 0x7D:
                    raise self.syntax(buf.start, "trailing comma in object")
            if c != 0x22:  # '"'
                raise self.syntax(buf.start, "object keys must be strings")
            key = self._key()
            if self._next() != 0x3A:  # ':'
                raise self.syntax(buf.start, "expected ':'")
            buf.start += 1
            self._next()
            if key in self._keys:
                raise self.error(f"the key {key!r} appears twice at the top level (byte "
                                 f"{self.at(buf.start)}): which one describes the trace cannot "
                                 "be known", Kind.NOT_A_TRACE)
            self._keys.add(key)
            if key == "traceEvents":
                self._events_value()
            else:
                raw = self._value(key)
                if key in self.keep:
                    self.members[key] = raw
            after_value = True

    def _key(self) -> str:
        """The key string at ``buf.start``."""
        buf = self.buf
        while True:
            m = _STRING.match(buf.data, buf.start)
            if m is not None:
                break
            if buf.eof:
                raise self.truncated()
            if buf.live > self.max_event:
                raise self._too_big_member("a key")
            buf.fill(max(2 * buf.live, READ_BYTES))
        try:
            key = _KEY.decode(m.group())
        except msgspec.DecodeError as exc:
            raise self.syntax(buf.start + (diagnose.msgspec_byte(str(exc)) or 0),
                              diagnose.msgspec_reason(str(exc))) from None
        buf.start = m.end()
        return key

    def _value(self, key: str) -> bytes:
        """The raw JSON text of the member value at ``buf.start`` (checked by msgspec, on a
        window that grows until it holds the value: the rest of the buffer is not read)."""
        buf = self.buf
        window = 1 << 12
        while True:
            end = min(len(buf.data), buf.start + window)
            view = memoryview(buf.data)[buf.start:end]
            try:
                _RAW.decode(view)
                if end == len(buf.data) and buf.eof:
                    break  # the value runs to the end of the text
            except msgspec.DecodeError as exc:
                msg = str(exc)
                k = diagnose.msgspec_byte(msg)
                if "trailing characters" in msg and k is not None:
                    end = buf.start + len(bytes(view[:k - 1]).rstrip(_WS))
                    break
                if "truncated" not in msg:
                    raise self.syntax(buf.start + (k or 0), diagnose.msgspec_reason(msg)) from None
                if end == len(buf.data) and buf.eof:
                    raise self.truncated() from None
            except RecursionError:
                raise self._too_deep(f"the top-level member {key!r}") from None
            finally:
                view.release()
            if window > self.max_event:
                raise self._too_big_member(f"the top-level member {key!r}")
            window *= 4
            if buf.start + window > len(buf.data):
                buf.fill(window)
        raw = buf.data[buf.start:end]
        buf.start = end
        return raw

    def _too_big_member(self, what: str) -> TraceError:
        return self.error(f"{what} (byte {self.at(self.buf.start)}) is larger than "
                          f"{self.max_event / 2**20:g} MiB, more than a trace's header holds: "
                          "refused rather than read into memory", Kind.TOO_BIG)

    # ------------------------------------------------------------------ events

    def _events_value(self) -> None:
        buf = self.buf
        data, i = buf.data, buf.start
        if data[i] != 0x5B:  # '['
            kind = diagnose.first_value_kind(data, i)
            if kind is None:
                raise self.syntax(i, "invalid character")
            raise self.error(f"not a trace: traceEvents is {kind}, expected a list of events",
                             Kind.NOT_A_TRACE)
        buf.start += 1
        self._closed = False
        if self._next() == 0x5D:  # ']'
            buf.start += 1
            return
        while True:
            self.n_events += self._batch(self.n_events)
            if self._closed:
                return
            c = self._next()
            if c == 0x5D:
                buf.start += 1
                return
            if c != 0x2C:
                raise self.syntax(buf.start, "expected ',' or ']'")
            buf.start += 1
            if self._next() == 0x5D:
                raise self.syntax(buf.start, "trailing comma in array")

    def _cuts(self, p: int, hi: int) -> Iterator[int]:
        """Candidate cuts (the index of a ``}``) in ``buf.data[p:hi]``, last first."""
        data = self.buf.data
        window = 1 << 16
        top = hi
        while top > p:
            lo = max(p, top - window)
            end = min(len(data), top + 4096)
            cut = _CUT_AT_END if end == len(data) and self.buf.eof else _CUT
            found = [m.start() for m in cut.finditer(data, lo, end) if m.start() < top]
            yield from reversed(found)
            top = lo
            window *= 4

    def _batch(self, index: int) -> int:
        """Decode the batch of events starting at ``buf.start`` (an event's first byte);
        leave ``buf.start`` after its last ``}``. Returns its number of events."""
        buf = self.buf
        limit = self.batch_bytes
        while True:
            buf.fill(limit + CUT_LOOKAHEAD)
            p, data = buf.start, buf.data
            hi = min(len(data), p + limit)
            for attempt, cut in enumerate(self._cuts(p, hi)):
                if attempt == MAX_CUT_TRIES:
                    break
                batch = Batch(memoryview(data)[p:cut + 1], index, buf.offset + p)
                try:
                    n = self._decode(batch)
                except NotABoundary:
                    continue
                except ArrayEnds as end:
                    n = self._decode(Batch(bytes(batch.data[:end.pos]).rstrip(_WS), index,
                                           batch.offset))
                    buf.start = p + end.pos + 1
                    self._closed = True
                    return n
                buf.start = cut + 1
                buf.release_read()
                return n
            if buf.eof and p + limit >= len(data):
                self._explain(Batch(memoryview(data)[p:], index, buf.offset + p), at_end=True)
            if limit >= self.max_event:
                self._explain(Batch(memoryview(data)[p:], index, buf.offset + p), at_end=False)
            limit = min(2 * limit, self.max_event)

    def _decode(self, batch: Batch) -> int:
        try:
            return self.target.decode(batch)
        except Malformed as exc:
            raise self.syntax(batch.offset - self.buf.offset + exc.pos, exc.reason, batch) from None
        except TooDeep:
            raise self._too_deep(f"traceEvents[{batch.index}] or an event after it "
                                 f"(from byte {self.at(batch.offset - self.buf.offset)})") from None

    def _explain(self, batch: Batch, *, at_end: bool) -> NoReturn:
        """No event ends in ``batch``: raise its error, or (nothing wrong so far) say the
        text ends (``at_end``) or the event is too big."""
        try:
            self.target.explain(batch)
        except Malformed as exc:
            raise self.syntax(batch.offset - self.buf.offset + exc.pos, exc.reason, batch) from None
        except TooDeep:
            raise self._too_deep(f"traceEvents[{batch.index}]") from None
        except Truncated:
            if at_end:
                raise self.truncated() from None
        start = self.at(batch.offset - self.buf.offset)
        raise self.error(f"traceEvents[{batch.index}] (from byte {start}) is larger than "
                         f"{self.max_event / 2**20:g} MiB: no profiler writes events this big "
                         "(a damaged file?); refused rather than read into memory "
                         "(--max-memory sets the bound)", Kind.TOO_BIG)
