"""The wording of every problem the trace reader finds in a file's bytes, in one place.

The JSON parser says *that* byte N is wrong; users need to know *what* is wrong: a file
compressed with something other than gzip (or gzip twice), text in UTF-16, a ``NaN`` or
``Infinity`` that Python's ``json`` writes for non-finite floats (not JSON), a file that ends
in zero bytes (a crash or a full disk while writing). Byte offsets in messages are offsets
in the file's JSON text (after gunzip): the caller maps them (see
:meth:`pipeaudit.trace.source.TraceBytes.original_offset`).
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
#: Byte-order marks and the patterns of JSON in other Unicode encodings.
_ENCODINGS: tuple[tuple[bytes, str], ...] = (
    (b"\xff\xfe\x00\x00", "UTF-32LE"), (b"\x00\x00\xfe\xff", "UTF-32BE"),
    (b"\xff\xfe", "UTF-16LE"), (b"\xfe\xff", "UTF-16BE"),
)
_UTF16_LE = re.compile(rb"^(?:[ \t\r\n]\x00)*[{\[]\x00")
_UTF16_BE = re.compile(rb"^(?:\x00[ \t\r\n])*\x00[{\[]")

#: ``(byte N)`` in msgspec's messages (the one place that reads it).
BYTE_RE = re.compile(r"\s*\(byte (\d+)\)")
_NAME_RE = re.compile(rb'"name"\s*:\s*"((?:[^"\\]|\\.)*)"')
_KEY_RE = re.compile(rb'"((?:[^"\\]|\\.)*)"\s*:\s*$')
_NON_FINITE = (b"NaN", b"-Infinity", b"Infinity", b"-NaN")

TRUNCATED = "truncated JSON (the file ends in the middle of the document)"
NESTED = "invalid JSON: nested too deeply (more levels of [ and { than the JSON decoder takes)"
UTF8_NOTE = "{count} invalid UTF-8 byte sequences in strings replaced by U+FFFD"


def msgspec_byte(msg: str) -> int | None:
    """The N of ``(byte N)`` in a msgspec error message."""
    m = BYTE_RE.search(msg)
    return int(m.group(1)) if m else None


def msgspec_reason(msg: str) -> str:
    """msgspec's DecodeError text without its prefix and its byte."""
    return BYTE_RE.sub("", msg.replace("JSON is malformed: ", ""))


def compressor_problem(data: bytes) -> str | None:
    """'not JSON: ...' for data that starts with another compressor's magic bytes."""
    for magic, what, fix in OTHER_COMPRESSORS:
        if data.startswith(magic):
            return f"not JSON: the file is {what}; pipeaudit reads JSON, plain or gzip: {fix}"
    return None


def encoding_problem(data: bytes) -> str | None:
    """'not JSON: ...' for JSON text in UTF-16 or UTF-32."""
    name = next((n for bom, n in _ENCODINGS if data.startswith(bom)), None)
    if name is None and _UTF16_LE.match(data):
        name = "UTF-16LE"
    if name is None and _UTF16_BE.match(data):
        name = "UTF-16BE"
    if name is None:
        return None
    return (f"not JSON that pipeaudit reads: the text is {name}, JSON files are UTF-8; convert it "
            f"first: iconv -f {name} -t UTF-8")


def gz_name(name: str) -> str | None:
    """The gzip suffix a file's name ends in (``.gz``, ``.gzip``), or None."""
    low = name.lower()
    return next((s for s in (".gz", ".gzip") if low.endswith(s)), None)


def not_json(data: bytes, pos: int, name: str = "") -> str:
    """Why a file whose first value starts at ``pos`` is not JSON (``data``: its first bytes;
    ``name``: the file's name, which may promise gzip)."""
    known = compressor_problem(data) or encoding_problem(data)
    if known:
        return known
    preview = data[:24].decode("utf-8", "replace")
    suffix = gz_name(name)
    if suffix:
        return (f"not gzip: the name ends in {suffix}, but the file is neither gzip nor JSON (it "
                f"starts with {preview!r})")
    return f"not JSON (invalid character (byte {pos}); the file starts with {preview!r})"


def first_value_kind(data: bytes, pos: int) -> str | None:
    """The JSON kind of the value starting at ``data[pos]`` ("a list", "a number", ...), or
    None when no JSON value starts there."""
    c = data[pos:pos + 1]
    if c == b"{":
        return "an object"
    if c == b"[":
        return "a list"
    if c == b'"':
        return "a string"
    if c and (c in b"0123456789" or (c == b"-" and data[pos + 1:pos + 2].isdigit())):
        return "a number"
    if data.startswith((b"true", b"false"), pos):
        return "a boolean"
    if data.startswith(b"null", pos):
        return "null"
    return None


def syntax_problem(reason: str, at: int) -> str:
    """The generic message of a syntax error at byte ``at``."""
    return f"invalid JSON: {reason} (byte {at})"


def non_finite_problem(data: bytes, pos: int, at: int, index_base: int = 0) -> str | None:
    """The message for a ``NaN`` / ``Infinity`` at ``data[pos]``, or None. ``data`` holds
    complete events separated by commas (a batch), the first being ``traceEvents[index_base]``;
    ``at`` is the byte's offset in the file."""
    literal = next((w for w in _NON_FINITE if bytes(data[pos:pos + 9]).startswith(w)), None)
    if literal is None:
        return None
    index, name, key = locate(data, pos)
    where = f"traceEvents[{index_base + index}]" if index is not None else "a value"
    if index is not None and name is not None:
        where += f" ({name[:60]!r})"
    return (f"{where}: {key or 'a value'} is {literal.decode()} (byte {at}), which is not valid "
            "JSON (Python's json writes it for non-finite floats)")


def zeros_problem(count: int, at: int) -> str:
    """The message for ``count`` zero bytes from byte ``at`` to the end of the file."""
    if at == 0:
        return (f"not JSON: the file holds only zero bytes ({count:,}): it was never written "
                "(a crash or a full disk?)")
    return (f"invalid JSON: the last {count:,} bytes (from byte {at:,}) are zeros: the file was "
            "cut short while being written (a crash or a full disk?)")


def zero_byte_problem(at: int) -> str:
    return f"invalid JSON: a zero byte at byte {at:,} (the file is damaged)"


def locate(data: bytes, pos: int) -> tuple[int | None, str | None, str | None]:
    """(index of the event holding ``data[pos]`` in a batch of events, its name, the key of
    the value at ``pos``), as far as known."""
    from pipeaudit.trace.jsonscan import scan

    head = b'{"traceEvents":['
    sc = scan(head + bytes(data[:pos]))
    if sc is None:
        return None, None, None
    start = max(sc.events[-1][1] - len(head), 0) if sc.events else 0
    piece = bytes(data[start:pos])
    name_m = _NAME_RE.search(piece)
    key_m = _KEY_RE.search(piece[-200:])
    name = name_m.group(1).decode("utf-8", "replace") if name_m else None
    key = key_m.group(1).decode("utf-8", "replace") if key_m else None
    return len(sc.events), name, key


def utf8_repair_note(count: int) -> str:
    """The decode warning for invalid UTF-8 repaired by the byte reader."""
    return UTF8_NOTE.format(count=count)


_AT_RE = re.compile(r"^(?P<what>.*?) - at `\$(?P<where>[^`]*)`$", re.DOTALL)
_BATCH_AT = re.compile(r"^\[(\d+)\]")


def validation_problem(msg: str, index_base: int) -> str:
    """msgspec's ValidationError ``msg`` for a batch of events (``$[k]``: event
    ``index_base + k``) as a problem text: ``wrong type in traceEvents[12].name: ...``."""
    m = _AT_RE.match(msg)
    what, where = (m.group("what"), m.group("where")) if m else (msg, "")
    where = _BATCH_AT.sub(lambda b: f"[{index_base + int(b.group(1))}]", where)
    detail = what.replace("Expected", "expected")
    return f"wrong type in traceEvents{where}: {detail}"

