"""Precise one-line explanations of files that do not parse as JSON.

The JSON parser says *that* byte N is wrong; users need to know *what* is wrong: a file
compressed with something other than gzip (or gzip twice), a ``NaN`` or ``Infinity`` that
Python's ``json`` writes for non-finite floats (not JSON), a file that ends in zero bytes
(a crash or a full disk while writing). :func:`explain_decode_error` returns such a message,
or None when the generic one is as good as it gets.
"""

from __future__ import annotations

import re

#: Magic bytes of compressors pipeaudit does not read, and their names.
OTHER_COMPRESSORS: tuple[tuple[bytes, str, str], ...] = (
    (b"\x1f\x8b", "gzip-compressed twice", "gunzip it once"),
    (b"BZh", "bzip2-compressed", "decompress it first: bunzip2"),
    (b"\xfd7zXZ\x00", "xz-compressed", "decompress it first: unxz"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed", "decompress it first: zstd -d"),
    (b"PK\x03\x04", "a zip archive", "extract it first: unzip"),
    (b"\x04\x22\x4d\x18", "lz4-compressed", "decompress it first: lz4 -d"),
    (b"7z\xbc\xaf\x27\x1c", "a 7-zip archive", "extract it first: 7z x"),
)

_BYTE_RE = re.compile(r"\(byte (\d+)\)")
_NAME_RE = re.compile(rb'"name"\s*:\s*"((?:[^"\\]|\\.)*)"')
_KEY_RE = re.compile(rb'"((?:[^"\\]|\\.)*)"\s*:\s*$')
_NON_FINITE = (b"NaN", b"-Infinity", b"Infinity", b"-NaN")


def compressor_problem(data: bytes) -> str | None:
    """'not JSON: ...' for data that starts with another compressor's magic bytes."""
    for magic, what, fix in OTHER_COMPRESSORS:
        if data.startswith(magic):
            return f"not JSON: the file is {what}; pipeaudit reads JSON, plain or gzip: {fix}"
    return None


def locate(data: bytes, pos: int) -> tuple[int | None, str | None, str | None]:
    """(index in traceEvents, event name, field name) of byte ``pos``, as far as known."""
    from pipeaudit.trace.jsonscan import scan

    sc = scan(data[:pos])
    if sc is None:
        return None, None, None
    start = sc.events[-1][1] if sc.events else 0
    piece = data[start:pos]
    name_m = _NAME_RE.search(piece)
    key_m = _KEY_RE.search(piece[-200:])
    name = name_m.group(1).decode("utf-8", "replace") if name_m else None
    key = key_m.group(1).decode("utf-8", "replace") if key_m else None
    return len(sc.events), name, key


def explain_decode_error(data: bytes, msg: str) -> str | None:
    """A precise problem text for msgspec's DecodeError ``msg`` on ``data``, or None."""
    m = _BYTE_RE.search(msg)
    if m is None:
        return None
    pos = int(m.group(1))
    if pos == 0:
        return compressor_problem(data)
    head = data.lstrip(b"\xef\xbb\xbf \t\r\n")[:1]
    if head not in (b"{", b"["):  # "this is not a trace": JSON only by its first letter
        preview = data[:24].decode("utf-8", "replace")
        return f"not JSON (invalid character (byte {pos}); the file starts with {preview!r})"
    literal = next((w for w in _NON_FINITE if data.startswith(w, pos)), None)
    if literal is not None:
        index, name, key = locate(data, pos)
        where = f"traceEvents[{index}]" if index is not None else "a value"
        if index is not None and name is not None:
            where += f" ({name[:60]!r})"
        field = key or "a value"
        return (f"{where}: {field} is {literal.decode()} (byte {pos}), which is not valid JSON "
                "(Python's json writes it for non-finite floats)")
    if data[pos:pos + 1] == b"\x00":
        zeros = len(data) - pos
        if not data[pos:].strip(b"\x00"):
            return (f"invalid JSON: the last {zeros:,} bytes (from byte {pos:,}) are zeros: the file "
                    "was cut short while being written (a crash or a full disk?)")
        return f"invalid JSON: a zero byte at byte {pos:,} (the file is damaged)"
    return None


def utf8_repair_note(count: int) -> str:
    """The decode warning for :func:`repair_utf8`'s count (every decode path words it so)."""
    return f"{count} invalid UTF-8 byte sequences in strings replaced by U+FFFD"


def repair_utf8(data: bytes) -> tuple[bytes, int]:
    """Replace invalid UTF-8 sequences by U+FFFD; return the new data and how many."""
    text = data.decode("utf-8", errors="replace")
    fixed = text.encode("utf-8")
    count = text.count("\ufffd") - data.count("\ufffd".encode())
    return fixed, max(count, 1)
