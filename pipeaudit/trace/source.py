"""Reading a trace file's bytes: whole file at once, gzip recognised by its magic bytes.

Input files are opened read-only and never modified. A gzip file is decompressed in one call
(``zlib`` with the gzip wrapper, concatenated members supported); the decompressed bytes are
what the JSON decoder parses, so nothing is copied or re-encoded on the way.
"""

from __future__ import annotations

import errno
import os
import zlib
from pathlib import Path

from pipeaudit.errors import TraceError

GZIP_MAGIC = b"\x1f\x8b"
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


def gunzip(data: bytes) -> bytes:
    """Decompress all gzip members of ``data``; raise ValueError with a short reason."""
    out: list[bytes] = []
    rest = data
    while rest:
        if not rest.startswith(GZIP_MAGIC):
            if out and not rest.strip(b"\x00"):
                break  # zero padding after the last member, as tape-style writers leave it
            raise ValueError("corrupt gzip data (garbage after the compressed stream)")
        d = zlib.decompressobj(wbits=31)
        try:
            out.append(d.decompress(rest))
            out.append(d.flush())
        except zlib.error as exc:
            raise ValueError(f"corrupt gzip data ({exc})") from None
        if not d.eof:
            raise ValueError("truncated gzip file (the compressed stream ends early)")
        rest = d.unused_data
    return b"".join(out) if len(out) != 1 else out[0]


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
