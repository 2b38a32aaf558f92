"""Reading a trace file's bytes: whole file at once, gzip recognised by its magic bytes.

Input files are opened read-only and never modified. A gzip file is decompressed in one call
(concatenated members supported); the decompressed bytes are what the JSON decoder parses,
so nothing is copied or re-encoded on the way.

Decompression uses ISA-L (the ``isal`` package, ``isal_zlib``: the same zlib format, about
2.5x faster) when it is installed, else the standard library's ``zlib``. Error messages are
always zlib's: a stream that ISA-L refuses is decompressed again with zlib to word the
error (failures only, so the cost does not matter).
"""

from __future__ import annotations

import errno
import os
import zlib
from pathlib import Path

from pipeaudit.errors import TraceError

try:  # ISA-L: a drop-in, faster zlib (optional)
    from isal import isal_zlib as _fast_zlib
except ImportError:  # pragma: no cover - depends on the environment
    _fast_zlib = None

GZIP_MAGIC = b"\x1f\x8b"
#: Guess of the JSON size of a gzip file when its trailer cannot tell (Kineto traces
#: compress 8-20x; the guess errs on the big side for memory budgets).
GZIP_RATIO_GUESS = 10
_UTF8_BOM = b"\xef\xbb\xbf"


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


def decompressobj(fast: bool = True):
    """A gzip-format decompressor object (zlib API): ISA-L's when available and ``fast``."""
    if fast and _fast_zlib is not None:
        return _fast_zlib.decompressobj(wbits=31)
    return zlib.decompressobj(wbits=31)


def _gunzip(data: bytes, fast: bool) -> bytes:
    errors = (zlib.error,) if _fast_zlib is None else (zlib.error, _fast_zlib.error)
    out: list[bytes] = []
    rest = data
    while rest:
        if not rest.startswith(GZIP_MAGIC):
            if out and not rest.strip(b"\x00"):
                break  # zero padding after the last member, as tape-style writers leave it
            raise ValueError("corrupt gzip data (garbage after the compressed stream)")
        d = decompressobj(fast)
        try:
            out.append(d.decompress(rest))
            out.append(d.flush())
        except errors as exc:
            raise ValueError(f"corrupt gzip data ({exc})") from None
        if not d.eof:
            raise ValueError("truncated gzip file (the compressed stream ends early)")
        rest = d.unused_data
    return b"".join(out) if len(out) != 1 else out[0]


def gunzip(data: bytes) -> bytes:
    """Decompress all gzip members of ``data``; raise ValueError with a short reason."""
    if _fast_zlib is None:
        return _gunzip(data, False)
    try:
        return _gunzip(data, True)
    except ValueError:
        return _gunzip(data, False)  # zlib's wording of the problem (or zlib's own result)


def estimated_json_bytes(path: Path) -> int:
    """Size of the file's JSON: the file size, or for gzip the size its trailer records
    (ISIZE, modulo 4 GiB) unless that is implausible, then :data:`GZIP_RATIO_GUESS` x."""
    size = os.path.getsize(path)
    with open(path, "rb") as fh:
        if fh.read(2) != GZIP_MAGIC:
            return size
        if size < 18:
            return size
        fh.seek(-4, os.SEEK_END)
        isize = int.from_bytes(fh.read(4), "little")
    guess = size * GZIP_RATIO_GUESS
    # ISIZE is exact for one member under 4 GiB; past that it wraps around.
    if size * 100 < (1 << 32) and isize >= size // 2:
        return isize
    return max(guess, isize)


def read_bytes(path: Path) -> tuple[bytes, int, bool]:
    """Return ``(json_bytes, size_on_disk, was_gzip)``; raise TraceError on any problem."""
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            data = fh.read()
    except IsADirectoryError:
        raise TraceError(path, "is a directory, expected a trace file") from None
    except OSError as exc:
        raise TraceError(path, os_problem(exc)) from None
    if not data:
        raise TraceError(path, "empty file")
    gz = data.startswith(GZIP_MAGIC)
    if gz:
        try:
            data = gunzip(data)
        except ValueError as exc:
            raise TraceError(path, str(exc)) from None
        except MemoryError:
            raise TraceError(path, "out of memory while decompressing") from None
        if not data:
            raise TraceError(path, "empty file (the gzip stream holds no data)")
    if data.startswith(_UTF8_BOM):
        data = data[len(_UTF8_BOM):]
    if data.isspace():
        raise TraceError(path, "empty file (only whitespace)")
    return data, size, gz
