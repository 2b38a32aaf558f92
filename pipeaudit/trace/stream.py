"""Streaming decode: a trace file of any size in bounded memory, same result as the
whole-file decode.

The whole-file decode (:func:`pipeaudit.trace.decode.read_trace`) holds the decompressed
JSON and every decoded event at once: about :data:`WHOLE_FILE_FACTOR` x the JSON size at
its peak. For a file bigger than its memory budget the decoder streams instead:

1. the file is read and gunzipped in chunks (ISA-L when installed, else zlib);
2. the header (everything before ``"traceEvents": [``) is found and checked;
3. the ``traceEvents`` array is cut into batches of about ``batch_bytes`` at event
   boundaries, and each batch is read by the compiled scanner
   (:mod:`pipeaudit.trace.scanner`) straight into columns; a batch it does not answer (or
   every batch, without the scanner) is decoded by msgspec (``[`` + batch + ``]``, the same
   typed Structs as the whole-file decode) and turned into columns at once
   (:class:`pipeaudit.trace.decode.TableParts`); only the columns are kept;
4. after the array, the rest of the document (keys after ``traceEvents``) is decoded with
   the header, and the columns are finished exactly as the whole-file decode does.

Why cutting is safe. A cut is tried at the last ``}`` followed by ``,`` and ``{`` in the
buffer (with any whitespace between: how every writer separates events). JSON is read left
to right from a known event boundary, so the scanner reads the text as whole events, and
``[`` + text + ``]`` decodes, only if the cut really closes a top-level event: a cut inside
a string leaves the string open (msgspec: truncated), a cut inside a nested object leaves
it open (msgspec: error at the appended ``]``). Such a
failure moves the cut to the previous candidate. An error *before* the cut is a real error
in the file, reported with its position in the whole document, as the whole-file decode
words it. The same reasoning finds the end of the array ("trailing characters" right after
its ``]``).

Memory: the compressed read buffer, one decompressed chunk, one batch of JSON and its
decoded events, and the columns built so far (about 60-100 bytes per kept event, some
8-15 % of the JSON size). Speed: with the scanner 2-2.6x faster than the whole-file decode
at every size (so ``read_trace(max_memory=...)`` then streams every file); without it the
same msgspec decode and column building as the whole-file path.

ijson (with its yajl2_c backend) was measured as the library alternative: 18 MB/s to
produce events as dicts, against about 200 MB/s for msgspec on the same file, so the
cutting is done here and the parsing left to msgspec.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from os import PathLike
from pathlib import Path

import msgspec

from pipeaudit.errors import TraceError
from pipeaudit.trace.decode import (
    DROPPED_CATEGORIES,
    TableParts,
    _decode_problem,
    _parse,
    _tables,
    _validation_problem,
    check_base_ns,
    check_columns,
    finish_tables,
    finish_trace,
)
from pipeaudit.trace.diagnose import repair_utf8, utf8_repair_note
from pipeaudit.trace.model import RankTrace
from pipeaudit.trace.scanner import available as scanner_available
from pipeaudit.trace.scanner import scan_batch
from pipeaudit.trace.schema import TRACE_DECODER, Event, batch_decoder
from pipeaudit.trace.source import (
    GZIP_MAGIC,
    _UTF8_BOM,
    decompressobj,
    estimated_json_bytes,
    os_problem,
)

#: Peak memory of the whole-file decode as a multiple of the JSON size (measured: 3.3-3.8x
#: on harness traces of 25-110 MB, including the interpreter).
WHOLE_FILE_FACTOR = 4
#: Compressed bytes read per call.
READ_BYTES = 1 << 20
#: Files with more JSON than this are always streamed (measured on 55 and 110 MB harness traces:
#: as fast as the whole-file decode with 4 MB batches, at 45 % of its peak memory).
STREAM_ABOVE = 16 << 20
#: Bounds of the batch size (JSON bytes decoded at once); 4 MB measured fastest.
MIN_BATCH = 1 << 20
MAX_BATCH = 4 << 20
#: Cut candidates tried before the batch is made bigger (each failure costs a decode).
MAX_CUT_TRIES = 4

_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_BYTE = re.compile(r"\(byte (\d+)\)")
_VALIDATION_AT = re.compile(r"- at `\$\[(\d+)\]")
_WS = b" \t\r\n"


def must_stream(path: str | PathLike[str], max_memory: int) -> bool:
    """True when the whole-file decode of ``path`` would need more than ``max_memory``, or
    the file holds more than :data:`STREAM_ABOVE` bytes of JSON."""
    try:
        size = estimated_json_bytes(Path(path))
    except OSError:
        return False  # the whole-file path reports it
    return size * WHOLE_FILE_FACTOR > max_memory or size > STREAM_ABOVE


def streams_for_speed(path: str | PathLike[str]) -> bool:
    """The compiled scanner is built (the streaming decode uses it, and is then 2-2.6x
    faster than the whole-file decode at every size) and ``path`` is a file."""
    return scanner_available() and Path(path).is_file()


def needs_streaming(path: str | PathLike[str], max_memory: int) -> bool:
    """:func:`must_stream` or :func:`streams_for_speed`."""
    return streams_for_speed(path) or must_stream(path, max_memory)


def batch_bytes_for(max_memory: int) -> int:
    """JSON bytes per batch for a memory budget: 1/16 of it, within 1-4 MB."""
    return max(MIN_BATCH, min(MAX_BATCH, max_memory // 16))


# --------------------------------------------------------------------------- bytes


def _open(path: Path):
    try:
        return open(path, "rb")
    except IsADirectoryError:
        raise TraceError(path, "is a directory, expected a trace file") from None
    except OSError as exc:
        raise TraceError(path, os_problem(exc)) from None


def _is_gzip(path: Path) -> bool:
    with _open(path) as fh:
        try:
            head = fh.read(2)
        except OSError as exc:
            raise TraceError(path, os_problem(exc)) from None
    if not head:
        raise TraceError(path, "empty file")
    return head == GZIP_MAGIC


def _chunks(path: Path, gz: bool, fast: bool) -> Iterator[bytes]:
    """Decompressed chunks of ``path``; ValueError (gzip problems) or TraceError."""
    with _open(path) as fh:
        try:
            data = fh.read(READ_BYTES)
            if not gz:
                while data:
                    yield data
                    data = fh.read(READ_BYTES)
                return
            yield from _gunzip_chunks(fh, data, fast)
        except OSError as exc:
            raise TraceError(path, os_problem(exc)) from None


def _gunzip_chunks(fh, data: bytes, fast: bool) -> Iterator[bytes]:
    """The decompressed output of every gzip member, with :func:`source.gunzip`'s rules."""
    import zlib

    try:
        from isal import isal_zlib

        errors: tuple = (zlib.error, isal_zlib.error)
    except ImportError:  # pragma: no cover
        errors = (zlib.error,)
    members = 0
    limit = READ_BYTES * 4
    while True:
        while len(data) < 2:  # a new member (or the end) starts at data[0]
            more = fh.read(READ_BYTES)
            if not more:
                break
            data += more
        if not data:
            return
        if not data.startswith(GZIP_MAGIC):
            if members and _rest_is_zeros(fh, data):
                return  # zero padding after the last member, as tape-style writers leave it
            raise ValueError("corrupt gzip data (garbage after the compressed stream)")
        d = decompressobj(fast)
        members += 1
        while True:
            try:
                out = d.decompress(data, limit)
                while d.unconsumed_tail and not d.eof:
                    if out:
                        yield out
                    out = d.decompress(d.unconsumed_tail, limit)
            except errors as exc:
                raise ValueError(f"corrupt gzip data ({exc})") from None
            if out:
                yield out
            if d.eof:
                data = d.unused_data
                break
            data = fh.read(READ_BYTES)
            if not data:
                try:
                    tail = d.flush()
                except errors as exc:
                    raise ValueError(f"corrupt gzip data ({exc})") from None
                if tail:
                    yield tail
                raise ValueError("truncated gzip file (the compressed stream ends early)")


def _rest_is_zeros(fh, data: bytes) -> bool:
    if data.strip(b"\x00"):
        return False
    while True:
        more = fh.read(READ_BYTES)
        if not more:
            return True
        if more.strip(b"\x00"):
            return False


def _json_chunks(path: Path) -> Iterator[bytes]:
    """Decompressed chunks, BOM removed; errors worded as :func:`source.read_bytes` does."""
    gz = _is_gzip(path)
    produced = False
    first = True
    try:
        for chunk in _chunks(path, gz, True):
            if first:
                first = False
                if chunk.startswith(_UTF8_BOM):
                    chunk = chunk[len(_UTF8_BOM):]
            if chunk:
                produced = True
                yield chunk
    except ValueError as exc:
        # zlib's wording of the problem: run the stdlib decoder over the file again
        try:
            for _ in _chunks(path, gz, False):
                pass
        except ValueError as slow_exc:
            raise TraceError(path, str(slow_exc)) from None
        raise TraceError(path, str(exc)) from None
    if gz and first:
        raise TraceError(path, "empty file (the gzip stream holds no data)")
    del produced


class _Buffer:
    """The decompressed document as a sliding window: ``data[start:]`` is what is left to
    decode, and ``data[0]`` is document byte ``offset``. Consumed bytes are dropped (the
    live rest copied) only when new data is appended, so a batch costs one copy."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self.chunks = chunks
        self.data = b""
        self.start = 0
        self.offset = 0
        self.eof = False

    @property
    def live(self) -> int:
        return len(self.data) - self.start

    def fill(self, size: int) -> None:
        """Read until at least ``size`` live bytes are held or the file ends (this may move
        ``start`` to 0: indices into ``data`` must be taken again)."""
        parts: list[bytes] = []
        have = self.live
        while have < size and not self.eof:
            try:
                chunk = next(self.chunks)
            except StopIteration:
                self.eof = True
                break
            parts.append(chunk)
            have += len(chunk)
        if parts:
            self.data = b"".join([self.data[self.start:], *parts])
            self.offset += self.start
            self.start = 0

    def drop_to(self, index: int) -> None:
        """Everything before ``data[index]`` is consumed."""
        self.start = index

    def skip_ws(self) -> int:
        """Index of the first non-whitespace live byte (``len(data)`` at the end)."""
        while True:
            data, pos = self.data, self.start
            while pos < len(data) and data[pos] in _WS:
                pos += 1
            if pos < len(data) or self.eof:
                return pos
            self.start = pos
            self.fill(READ_BYTES)


# --------------------------------------------------------------------------- errors


def _decode_error(path: Path, msg: str, doc_offset: int) -> TraceError:
    """A msgspec DecodeError of a piece whose byte 0 is document byte ``doc_offset``."""
    m = _BYTE.search(msg)
    if m:
        msg = msg[: m.start()] + f"(byte {doc_offset + int(m.group(1))})" + msg[m.end():]
    return TraceError(path, _decode_problem(msg))


def _validation_error(path: Path, msg: str, index_base: int) -> TraceError:
    """A msgspec ValidationError of a batch as the whole-file decode words it."""
    msg = _VALIDATION_AT.sub(lambda m: f"- at `$.traceEvents[{index_base + int(m.group(1))}]", msg)
    return TraceError(path, _validation_problem(msg))


def _error_byte(msg: str) -> int | None:
    m = _BYTE.search(msg)
    return int(m.group(1)) if m else None


# --------------------------------------------------------------------------- decode


class _StreamDecoder:
    def __init__(self, path: Path, columns: frozenset[str], batch_bytes: int, repair_utf8: bool) -> None:
        self.path = path
        self.batch = batch_bytes
        self.limit = batch_bytes  # the current batch's size (grows past an unusually big event)
        self.buf = _Buffer(_json_chunks(path))
        self.parts = TableParts(columns, errors={})
        self.decoder = batch_decoder(columns)
        self.index = 0  # traceEvents index of the next event
        self.repair_utf8 = repair_utf8  # else a UnicodeDecodeError propagates
        self.repaired = 0  # invalid UTF-8 sequences replaced
        self.header = b""  # the document up to and including "traceEvents": [

    # ---- header
    def find_array(self) -> bool:
        """Position the buffer at the first event; False if the document has no top-level
        ``traceEvents`` list (then the buffer holds the whole document)."""
        buf = self.buf
        buf.fill(READ_BYTES)
        if not buf.data.strip(_WS):
            if buf.eof:
                raise TraceError(self.path, "empty file (only whitespace)")
        pos = 0
        while True:
            m = _KEY.search(buf.data, pos)
            if m is None:
                if buf.eof:
                    return False
                pos = max(0, len(buf.data) - 64)
                buf.fill(len(buf.data) * 2)  # start is 0 here: indices stay valid
                continue
            if self._is_top_level(buf.data[: m.end()]):
                self.header = buf.data[: m.end()]
                buf.drop_to(m.end())
                return True
            pos = m.start() + 1

    @staticmethod
    def _is_top_level(prefix: bytes) -> bool:
        try:
            doc = msgspec.json.decode(prefix + b"]}")
        except (msgspec.DecodeError, ValueError):
            return False
        return isinstance(doc, dict) and bool(doc) and list(doc)[-1] == "traceEvents"

    # ---- events
    def events(self) -> bytes:
        """Decode every event; return what follows the array's ``]`` (the trailer start)."""
        buf = self.buf
        while True:
            buf.fill(self.limit + READ_BYTES)
            start = buf.skip_ws()
            if start < len(buf.data) and buf.data[start:start + 1] == b"]":
                trailer = buf.data[start + 1:]
                buf.drop_to(len(buf.data))
                return trailer
            if start >= len(buf.data):  # eof right after "[": the document is cut short
                raise TraceError(self.path, _decode_problem("Input data was truncated"))
            done = self._next_batch(start)
            if done is not None:
                return done

    def _cuts(self, start: int) -> Iterator[int]:
        """Candidate cut positions (the ``}`` closing an event) before ``start`` + the batch
        size, last first."""
        data = self.buf.data
        hi = min(len(data), start + self.limit)
        window = 1 << 16
        while hi > start:
            lo = max(start, hi - window)
            found = [c for c in (m.start() for m in _BOUNDARY.finditer(data, lo, hi + 256)) if c < hi]
            yield from reversed(found)
            hi = lo
            window *= 4

    def _next_batch(self, start: int) -> bytes | None:
        """Decode one batch from ``start``; return the trailer if the array ended."""
        buf = self.buf
        for attempt, cut in enumerate(self._cuts(start)):
            if attempt == MAX_CUT_TRIES:
                break
            piece = memoryview(buf.data)[start:cut + 1]
            scanned = scan_batch(piece, self.parts.columns, DROPPED_CATEGORIES)
            if scanned is not None:  # the compiled scanner read it: a true event boundary
                self.parts.add_scanned(scanned)
                self.index += scanned.n_events
            else:
                try:
                    events = self._decode(b"".join((b"[", piece, b"]")))
                except msgspec.DecodeError as exc:
                    msg = str(exc)
                    if "trailing characters" in msg:
                        return self._array_end(start, msg)
                    at = _error_byte(msg)
                    if "truncated" in msg or (at is not None and at >= len(piece) + 1):
                        continue  # not an event boundary: try the previous candidate
                    raise _decode_error(self.path, msg, buf.offset + start - 1) from None
                self._add(events)
                del events
            piece.release()
            buf.drop_to(buf.data.index(b"{", cut + 1))
            self.limit = self.batch
            return None
        if not buf.eof or self.limit < len(buf.data) - start:
            self.limit *= 2  # no good cut: a bigger batch
            buf.drop_to(start)
            buf.fill(self.limit + READ_BYTES)
            return None
        return self._last(start)

    def _last(self, start: int) -> bytes:
        """At the end of the file: the remaining events and the array's end."""
        buf = self.buf
        piece = buf.data[start:]
        try:
            events = self._decode(b"[" + piece)
        except msgspec.DecodeError as exc:
            msg = str(exc)
            if "trailing characters" in msg:
                return self._array_end(start, msg)
            raise _decode_error(self.path, msg, buf.offset + start - 1) from None
        # the array closed exactly at the end of the file: the object never closes
        self._add(events)
        raise TraceError(self.path, _decode_problem("Input data was truncated"))

    def _array_end(self, start: int, msg: str) -> bytes:
        """The array's ``]`` lies before the "trailing characters" position: decode the
        events up to it and return what follows."""
        buf = self.buf
        at = _error_byte(msg)
        assert at is not None
        end = buf.data.rindex(b"]", start, start + at - 1)  # the array's closing bracket
        self._add(self._decode(b"[" + buf.data[start:end + 1]))
        trailer = buf.data[end + 1:]
        buf.drop_to(len(buf.data))
        return trailer

    def _decode(self, doc: bytes) -> list[Event]:
        """A ``[...]`` batch of events; a wrong type is the file's error (TraceError), a
        syntax error (DecodeError) is left to the caller, which may try another cut."""
        try:
            return self._repairing(self.decoder, doc)
        except msgspec.ValidationError as exc:
            raise _validation_error(self.path, str(exc), self.index) from None

    def _repairing(self, decoder: msgspec.json.Decoder, doc: bytes):
        """``decoder.decode(doc)``; invalid UTF-8 is replaced and counted, as the whole-file
        decode does (unless ``repair_utf8`` is off), and counted only once the decode succeeds
        (a failed cut is tried again)."""
        try:
            return decoder.decode(doc)
        except UnicodeDecodeError:
            if not self.repair_utf8:
                raise
            fixed, count = repair_utf8(doc)
            out = decoder.decode(fixed)
            self.repaired += count
            return out

    def _add(self, events: list[Event]) -> None:
        self.parts.add(self.path, events, self.index)
        self.index += len(events)

    # ---- trailer and header
    def rest(self, trailer: bytes):
        """Decode the header and the keys after the array as one small document."""
        buf = self.buf
        trailer_offset = buf.offset + len(buf.data) - len(trailer)
        parts = [trailer]
        while not buf.eof:
            buf.fill(READ_BYTES)
            parts.append(buf.data[buf.start:])
            buf.drop_to(len(buf.data))
        doc = self.header + b"]" + b"".join(parts)
        try:
            return self._repairing(TRACE_DECODER, doc)
        except msgspec.DecodeError as exc:
            msg = str(exc)
            at = _error_byte(msg)
            if at is not None and at > len(self.header):
                raise _decode_error(self.path, msg, trailer_offset - len(self.header) - 1) from None
            raise TraceError(self.path, _decode_problem(msg)) from None
        except msgspec.ValidationError as exc:  # pragma: no cover - header fields are Any
            raise TraceError(self.path, _validation_problem(str(exc))) from None


def read_trace_streaming(
    path: str | PathLike[str],
    *,
    rank_hint: int | None = None,
    columns=None,
    max_memory: int | None = None,
    batch_bytes: int | None = None,
    repair_utf8: bool = True,
) -> RankTrace:
    """:func:`read_trace`'s result, decoded in batches (see the module docstring).

    ``batch_bytes`` (JSON bytes per batch) defaults to :func:`batch_bytes_for` the budget.
    ``repair_utf8``: replace invalid UTF-8 in the strings read, as the whole-file decode does
    (counted per batch decoded by msgspec); False: raise the UnicodeDecodeError.
    """
    path = Path(path)
    cols = columns if isinstance(columns, frozenset) else check_columns(columns)
    if batch_bytes is None:
        batch_bytes = batch_bytes_for(max_memory if max_memory is not None else 256 << 20)
    dec = _StreamDecoder(path, cols, max(1, batch_bytes), repair_utf8)
    if not dec.find_array():
        # no top-level traceEvents list: the whole (small) document is in the buffer
        data = dec.buf.data
        size = path.stat().st_size
        tf = _parse(path, data)  # raises the whole-file decode's error
        warnings: list[str] = []
        events, memory = _tables(path, tf.traceEvents, check_base_ns(path, tf), warnings, cols)
        return finish_trace(path, tf, events, memory, size, rank_hint, warnings,
                            n_events=len(tf.traceEvents))
    trailer = dec.events()
    tf = dec.rest(trailer)
    base_ns = check_base_ns(path, tf)
    dec.parts.raise_errors()
    warnings = [utf8_repair_note(dec.repaired)] if dec.repaired else []
    events, memory = finish_tables(dec.parts, base_ns, warnings)
    return finish_trace(path, tf, events, memory, path.stat().st_size, rank_hint, warnings,
                        n_events=dec.parts.n_events)
