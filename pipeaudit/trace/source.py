"""The one byte reader: a trace file's JSON text, chunk by chunk, in bounded memory.

What it does, in order:

1. **opens regular files only.** A FIFO, a device (``/dev/zero``) or a socket would block
   or never end: the file is opened without blocking and refused unless it is a regular
   file (:func:`open_regular`). Opened read-only; nothing is ever written.
2. **gunzips** when the first bytes are gzip's magic (whatever the name), member after
   member, zero padding after the last one allowed, with ISA-L (``isal``, about 2.5x faster)
   when installed, else the standard library's zlib. Output comes in pieces of at most
   :data:`OUT_BYTES`, so a small file of highly compressed data (a gigabyte of zeros) never
   becomes one big buffer. Errors are worded by zlib (a failing stream is decompressed again
   with zlib for that; failures only).
3. **drops a UTF-8 BOM.**
4. **repairs invalid UTF-8**: every invalid byte sequence becomes U+FFFD (as Python's
   ``errors="replace"`` does) and is counted (:attr:`TraceBytes.repaired`); the decoders
   after this never see invalid UTF-8, so both give the same strings and the same note.
   Replacing changes lengths: :meth:`TraceBytes.original_offset` maps an offset in the
   repaired text back to the file's own JSON text, so that messages name true bytes.

``tolerant=True`` (``--salvage``) stops at gzip damage that leaves a trustworthy prefix (a
truncated stream, garbage after complete members) instead of raising, and records it in
:attr:`TraceBytes.damage`. Corrupt compressed data is an error either way.

Every problem is a :class:`~pipeaudit.errors.TraceError` naming the file, with its kind.
"""

from __future__ import annotations

import bisect
import codecs
import errno
import itertools
import mmap
import os
import stat
import threading
import zlib
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pipeaudit.errors import TraceError, TraceErrorKind as Kind
from pipeaudit.trace.scanner import utf8_valid

try:  # ISA-L: a drop-in, faster zlib (optional)
    from isal import isal_zlib as _fast_zlib
except ImportError:  # pragma: no cover - depends on the environment
    _fast_zlib = None

GZIP_MAGIC = b"\x1f\x8b"
UTF8_BOM = b"\xef\xbb\xbf"
#: Guess of the JSON size of a gzip file when its trailer cannot tell (Kineto traces
#: compress 8-20x; the guess errs on the big side for memory budgets).
GZIP_RATIO_GUESS = 10
#: Bytes read from the file per call.
READ_BYTES = 1 << 20
#: A plain (not gzip) file of at least this many bytes is mapped into memory rather than read
#: (see :meth:`TraceBytes.chunks`).
MAP_MIN_BYTES = 1 << 20
#: Most decompressed bytes produced at once: the granularity of the document's batches
#: (a batch is joined from chunks until it is big enough, and what it overshoots is copied
#: again into the next one; 4 MiB chunks copied the text 1.8 times, 1 MiB ones 1.2 times).
OUT_BYTES = 1 << 20

_REPLACEMENT = "\ufffd".encode()
_REPAIR = "pipeaudit.trace.source.repair"
_repairs = threading.local()  # the (start, end) of each invalid sequence of one decode


#: More invalid UTF-8 sequences than this in one file: not a UTF-8 text with an odd name
#: (the repairs' offset map stays within a few MB).
MAX_REPAIRS = 200_000


class _TooManyRepairs(Exception):
    pass


def _record_repair(exc: UnicodeError) -> tuple[str, int]:
    """A codec error handler: U+FFFD for an invalid sequence, whose span is recorded."""
    assert isinstance(exc, UnicodeDecodeError)
    if len(_repairs.spans) >= _repairs.room:
        raise _TooManyRepairs
    _repairs.spans.append((exc.start, exc.end))
    return "\ufffd", exc.end


codecs.register_error(_REPAIR, _record_repair)
_GZIP_ERRORS: tuple = (zlib.error,) if _fast_zlib is None else (zlib.error, _fast_zlib.error)

#: ``os.open``, here so that tests can simulate a permission error (root reads everything).
_open_fd = os.open

TRUNCATED_GZIP = "truncated gzip file (the compressed stream ends early)"
GARBAGE_AFTER_GZIP = "corrupt gzip data (garbage after the compressed stream)"


def os_problem(exc: OSError) -> str:
    """A short human reason for an OSError (without the path, which TraceError adds)."""
    if exc.errno == errno.ENOENT:
        return "no such file or directory"
    if exc.errno == errno.ELOOP:
        return "symlink loop (too many levels of symbolic links)"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    if exc.errno == errno.EISDIR:
        return "is a directory, expected a trace file"
    return f"cannot read: {exc.strerror or exc}"


def not_regular_problem(mode: int) -> str | None:
    """Why a file of this ``st_mode`` is not read (None for a regular file)."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "is a directory, expected a trace file"
    what = ("a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a character device"
            if stat.S_ISCHR(mode) else "a block device" if stat.S_ISBLK(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
    return f"is {what}, not a regular file: only trace files are read"


def open_regular(path: str | os.PathLike[str]):
    """Open ``path`` for reading if it is a regular file (a FIFO is not waited on); raise
    :class:`TraceError` otherwise. Returns a binary file object."""
    try:
        fd = _open_fd(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise TraceError(path, os_problem(exc), Kind.PATH) from None
    try:
        problem = not_regular_problem(os.fstat(fd).st_mode)
    except OSError as exc:  # pragma: no cover - fstat of an open fd
        os.close(fd)
        raise TraceError(path, os_problem(exc), Kind.PATH) from None
    if problem is not None:
        os.close(fd)
        raise TraceError(path, problem, Kind.PATH)
    return os.fdopen(fd, "rb")


def estimated_json_bytes(path: str | os.PathLike[str]) -> int:
    """Size of the file's JSON: the file size, or for gzip the size its trailer records
    (ISIZE, modulo 4 GiB) unless that is implausible, then :data:`GZIP_RATIO_GUESS` x.
    Raises :class:`TraceError` for a file that cannot be read."""
    with open_regular(path) as fh:
        size = os.fstat(fh.fileno()).st_size
        if fh.read(2) != GZIP_MAGIC or size < 18:
            return size
        fh.seek(-4, os.SEEK_END)
        isize = int.from_bytes(fh.read(4), "little")
    # ISIZE is exact for one member under 4 GiB; past that it wraps around.
    if size * 100 < (1 << 32) and isize >= size // 2:
        return isize
    return max(size * GZIP_RATIO_GUESS, isize)


def decompressobj(fast: bool = True):
    """A gzip-format decompressor object (zlib API): ISA-L's when available and ``fast``."""
    if fast and _fast_zlib is not None:
        return _fast_zlib.decompressobj(wbits=31)
    return zlib.decompressobj(wbits=31)


@dataclass(frozen=True)
class Damage:
    """Where a tolerant read stopped: the problem and its kind."""

    problem: str
    kind: Kind


class _GzipProblem(Exception):
    def __init__(self, problem: str, kind: Kind) -> None:
        super().__init__(problem)
        self.problem, self.kind = problem, kind


class TraceBytes:
    """The JSON text of one trace file (see the module docstring).

    Iterate :meth:`chunks` once. After it: :attr:`repaired` (invalid UTF-8 sequences
    replaced), :attr:`damage` (tolerant mode), :attr:`compressed_used` (bytes of the file
    that were decompressed), :attr:`size` (the file's size on disk), :attr:`gzip`.
    """

    def __init__(self, path: str | os.PathLike[str], *, tolerant: bool = False) -> None:
        self.path = Path(path)
        self.tolerant = tolerant
        self.size = 0
        self.gzip = False
        self.repaired = 0
        self.damage: Damage | None = None
        self.compressed_used = 0
        #: the first bytes of the text as in the file (before any repair): what the file is
        self.first_bytes = b""
        self._memory: bytes | None = None
        self._read_bytes, self._out_bytes = READ_BYTES, OUT_BYTES
        self._may_map = True  # :meth:`head` reads a few bytes only
        # the repairs, one entry each (8 bytes a field): where the U+FFFD starts in the output,
        # where the invalid sequence starts in the original text, and its length there
        self._rep = array("q")
        self._orig = array("q")
        self._span = array("q")
        self._bom = 0

    def in_memory(self, data: bytes, *, offsets: bool = True) -> "TraceBytes":
        """A reader of ``data``, text this reader produced (or rebuilt from it, e.g. a
        salvaged document), with its file's size and repair count; ``offsets``: keep the map
        to the file's offsets (only right when ``data`` is this reader's text)."""
        tb = TraceBytes(self.path)
        tb._memory = data
        tb.size, tb.gzip, tb.repaired = self.size, self.gzip, self.repaired
        tb.first_bytes = self.first_bytes
        tb.compressed_used = self.compressed_used
        if offsets:
            tb._rep, tb._orig, tb._span, tb._bom = self._rep, self._orig, self._span, self._bom
        return tb

    # ---- offsets

    def original_offset(self, pos: int) -> int:
        """The offset in the file's JSON text (after gunzip, before repairs, counting a BOM)
        of offset ``pos`` of the text :meth:`chunks` produced."""
        i = bisect.bisect_right(self._rep, pos) - 1
        if i < 0:
            return pos + self._bom
        rep, orig, span = self._rep[i], self._orig[i], self._span[i]
        if pos < rep + len(_REPLACEMENT):
            return orig  # inside a U+FFFD: the invalid sequence's first byte
        return orig + span + (pos - rep - len(_REPLACEMENT))

    def head(self, size: int) -> bytes:
        """The first ``size`` bytes of the text (fewer if it is shorter), reading and
        decompressing little more; raises TraceError."""
        self._read_bytes = self._out_bytes = max(size, 64)
        self._may_map = False
        out = b""
        chunks = self.chunks()
        try:
            for chunk in chunks:
                out += chunk
                if len(out) >= size:
                    break
        finally:
            chunks.close()
        return out[:size]

    # ---- chunks

    def chunks(self) -> Iterator[bytes]:
        """The JSON text in chunks (never empty ones); raises TraceError."""
        if self._memory is not None:
            if self._memory:
                if not self.first_bytes:
                    self.first_bytes = self._memory[:64]
                yield self._memory
            return
        mapped = self._mapped() if self._may_map else None
        if mapped is not None:
            try:
                yield mapped
            finally:
                try:
                    mapped.close()
                except BufferError:  # a view of it is still alive: unmapped when it is gone
                    pass
            return
        raw = self._raw_chunks()
        head = b""
        for chunk in raw:  # at least the length of a BOM, unless the text is shorter
            head += chunk
            if len(head) >= len(UTF8_BOM):
                break
        self.first_bytes = head[:64]
        orig_at = 0
        if head.startswith(UTF8_BOM):
            head = head[len(UTF8_BOM):]
            orig_at = self._bom = len(UTF8_BOM)
        rep_at = 0
        carry = b""
        for data in itertools.chain((head,), raw):
            if carry:
                data = carry + data
                orig_at -= len(carry)
                carry = b""
            if data.isascii():
                out = data
            else:
                out, used = self._repair(data, rep_at, orig_at, final=False)
                carry = data[used:]
            rep_at += len(out)
            orig_at += len(data)
            if out:
                yield out
        # an incomplete sequence at the very end: invalid, unless the damage cut it (a
        # salvaged prefix stops before it)
        if carry and self.damage is None:
            orig_at -= len(carry)
            out, _ = self._repair(carry, rep_at, orig_at, final=True)
            yield out

    def _mapped(self) -> mmap.mmap | None:
        """The whole text of a plain file of :data:`MAP_MIN_BYTES` or more, mapped read-only
        from the page cache (nothing copied: the document's batches are views of it), when it
        needs no repair: valid UTF-8 throughout (checked by the compiled module; None when it
        is not built) and no BOM. None otherwise: the file is then read in chunks."""
        try:
            with open_regular(self.path) as fh:
                size = os.fstat(fh.fileno()).st_size
                if size < MAP_MIN_BYTES or fh.read(len(GZIP_MAGIC)) == GZIP_MAGIC:
                    return None
                mapped = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError, TraceError):  # read in chunks, which words any problem
            return None
        if mapped[:len(UTF8_BOM)] == UTF8_BOM or not utf8_valid(mapped):
            mapped.close()
            return None
        self.size = self.compressed_used = size
        self.first_bytes = mapped[:64]
        return mapped

    def _repair(self, data: bytes, rep_at: int, orig_at: int, final: bool) -> tuple[bytes, int]:
        """``data`` with invalid UTF-8 replaced; also how many bytes were used (an incomplete
        sequence at the end is left for the next chunk unless ``final``)."""
        _repairs.spans, _repairs.room = [], MAX_REPAIRS - self.repaired
        try:
            text, used = codecs.utf_8_decode(data, _REPAIR, final)
        except _TooManyRepairs:
            raise TraceError(self.path, f"not JSON that pipeaudit reads: more than {MAX_REPAIRS:,} "
                                        "invalid UTF-8 byte sequences (a binary file, or text in "
                                        "another encoding?)", Kind.NOT_JSON) from None
        finally:
            spans, _repairs.spans = _repairs.spans, []
        if not spans:
            return data[:used] if used < len(data) else data, used
        shift = 0  # length of the output so far minus the input's
        for start, end in spans:
            self._rep.append(rep_at + start + shift)
            self._orig.append(orig_at + start)
            self._span.append(end - start)
            shift += len(_REPLACEMENT) - (end - start)
        self.repaired += len(spans)
        return text.encode("utf-8"), used

    def _raw_chunks(self) -> Iterator[bytes]:
        """Decompressed (or plain) chunks of the file."""
        with open_regular(self.path) as fh:
            try:
                self.size = os.fstat(fh.fileno()).st_size
                head = fh.read(self._read_bytes)
                if not head:
                    raise TraceError(self.path, "empty file", Kind.EMPTY)
                # (one byte of gzip's magic alone: a gzip file cut after its first byte)
                self.gzip = head.startswith(GZIP_MAGIC) or head == GZIP_MAGIC[:1]
                if not self.gzip:
                    data = head
                    while data:
                        self.compressed_used += len(data)
                        yield data
                        data = fh.read(self._read_bytes)
                    return
                produced = False
                try:
                    for out in self._gunzip(fh, head, fast=True):
                        produced = True
                        yield out
                except _GzipProblem as exc:
                    if exc.kind is Kind.GZIP_CORRUPT and _fast_zlib is not None:
                        exc = self._zlib_wording(exc)
                    if self.tolerant and exc.kind is not Kind.GZIP_CORRUPT:
                        self.damage = Damage(exc.problem, exc.kind)
                        return
                    raise TraceError(self.path, exc.problem, exc.kind) from None
                if not produced:
                    raise TraceError(self.path, "empty file (the gzip stream holds no data)", Kind.EMPTY)
            except OSError as exc:
                raise TraceError(self.path, os_problem(exc), Kind.PATH) from None

    def _zlib_wording(self, exc: _GzipProblem) -> _GzipProblem:
        """zlib's wording of a stream ISA-L refused (decompressed again, output dropped)."""
        try:
            with open_regular(self.path) as fh:
                for _ in self._gunzip(fh, fh.read(READ_BYTES), fast=False, count=False):
                    pass
        except _GzipProblem as slow:
            return slow
        except (OSError, TraceError):  # pragma: no cover - it was readable a moment ago
            pass
        return exc

    def _gunzip(self, fh, data: bytes, *, fast: bool, count: bool = True) -> Iterator[bytes]:
        """The output of every gzip member; :class:`_GzipProblem` on damage."""
        members = 0
        while True:
            while len(data) < len(GZIP_MAGIC):  # a new member (or the end) starts at data[0]
                more = fh.read(READ_BYTES)
                if not more:
                    break
                data += more
            if not data:
                return
            if not data.startswith(GZIP_MAGIC):
                if members and _rest_is_zeros(fh, data):
                    if count:
                        self.compressed_used = self.size
                    return  # zero padding after the last member, as tape-style writers leave it
                if GZIP_MAGIC.startswith(data) and not fh.read(1):
                    raise _GzipProblem(TRUNCATED_GZIP, Kind.GZIP_TRUNCATED)  # a member cut after 1 byte
                raise _GzipProblem(GARBAGE_AFTER_GZIP, Kind.GZIP_TRAILING_GARBAGE)
            d = decompressobj(fast)
            members += 1
            while True:
                try:
                    out = d.decompress(data, self._out_bytes)
                    while True:
                        if out:
                            yield out
                        if not d.unconsumed_tail or d.eof:
                            break
                        out = d.decompress(d.unconsumed_tail, self._out_bytes)
                except _GZIP_ERRORS as exc:
                    raise _GzipProblem(f"corrupt gzip data ({exc})", Kind.GZIP_CORRUPT) from None
                if count:
                    self.compressed_used += len(data) - len(d.unused_data)
                if d.eof:
                    data = d.unused_data
                    break
                data = fh.read(self._read_bytes)
                if not data:
                    try:
                        tail = d.flush()
                    except _GZIP_ERRORS as exc:
                        raise _GzipProblem(f"corrupt gzip data ({exc})", Kind.GZIP_CORRUPT) from None
                    if tail:
                        yield tail
                    raise _GzipProblem(TRUNCATED_GZIP, Kind.GZIP_TRUNCATED)


def _rest_is_zeros(fh, data: bytes) -> bool:
    if data.translate(None, b"\x00"):
        return False
    while True:
        more = fh.read(READ_BYTES)
        if not more:
            return True
        if more.translate(None, b"\x00"):
            return False


def read_text(path: str | os.PathLike[str], *, tolerant: bool = False,
              limit: int | None = None) -> tuple[bytes, TraceBytes]:
    """The whole JSON text of ``path`` (see :class:`TraceBytes`) and its reader; with
    ``limit``, more than ``limit`` bytes of JSON is a TraceError."""
    tb = TraceBytes(path, tolerant=tolerant)
    parts: list[bytes] = []
    total = 0
    for chunk in tb.chunks():
        total += len(chunk)
        if limit is not None and total > limit:
            raise TraceError(path, f"more than {limit / 2**20:,.0f} MiB of JSON, more than its share "
                                   "of the memory budget (--max-memory)", Kind.TOO_BIG)
        parts.append(chunk)
    return b"".join(parts), tb
