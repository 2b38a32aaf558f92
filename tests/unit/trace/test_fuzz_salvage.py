"""Property tests of salvage and of the decoder on damaged bytes (thousands of tiny cases).

* ``scan`` + ``rebuild`` on a document cut at *any* byte recover exactly the events whose text
  ends before the cut, the header members before the array, and the complete members after
  it, whatever the strings hold (braces, brackets, quotes, escapes, newlines, non-ASCII).
* the byte reader's tolerant mode on a gzip stream cut anywhere gives a prefix of the original text.
* ``read_trace`` on cut, flipped, inserted or deleted bytes of a trace raises nothing but
  :class:`TraceError`, with ``salvage`` or without; what salvage returns is a subset of the
  original events.

``PIPEAUDIT_FUZZ_SCALE=10`` multiplies every example count (a longer search).
"""

from __future__ import annotations

import gzip
import os
import random

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeaudit.errors import TraceError, TraceErrorKind
from pipeaudit.trace import read_trace
from pipeaudit.trace.jsonscan import rebuild, scan
from pipeaudit.trace.source import read_text

SCALE = float(os.environ.get("PIPEAUDIT_FUZZ_SCALE", "1"))


def fuzz_settings(n: int):
    return settings(max_examples=max(1, int(n * SCALE)), deadline=None, database=None,
                    suppress_health_check=list(HealthCheck))


ENC = msgspec.json.Encoder(decimal_format="number")

# Each case draws a few choices and a seed; the seed makes the content (strings full of
# braces, quotes and escapes, nested args). Hypothesis pays ~10 µs per draw, and a richly
# structured document drawn field by field costs ~15 ms: seeds keep thousands of cases within
# seconds while every failure still reproduces from the printed example.
_ALPHABET = list('{}[]":,\\/ abcé\n\t\u2028') + ["\x00", "\U0001f600"]


def _text(rng: random.Random) -> str:
    return "".join(rng.choice(_ALPHABET) for _ in range(rng.randint(0, 6)))


def _value(rng: random.Random, depth: int = 0):
    kind = rng.randint(0, 7 if depth < 2 else 4)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([True, False])
    if kind == 2:
        return rng.randint(-(2**64), 2**64)
    if kind == 3:
        return rng.uniform(-1e9, 1e9)
    if kind == 4:
        return _text(rng)
    if kind == 5:
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 2))]
    return {_text(rng): _value(rng, depth + 1) for _ in range(rng.randint(0, 2))}


def _event(rng: random.Random) -> dict:
    e = {"ph": rng.choice("XiM"), "name": _text(rng)}
    if rng.random() < 0.7:
        e["ts"] = rng.randint(0, 2**50)
    if rng.random() < 0.5:
        e["args"] = {_text(rng): _value(rng) for _ in range(rng.randint(0, 2))}
    return e


def _members(rng: random.Random, avoid=()) -> dict:
    out = {}
    for _ in range(rng.randint(0, 2)):
        k = _text(rng)
        if k != "traceEvents" and k not in avoid:
            out[k] = _value(rng)
    return out


def _build(header: dict, events: list, trailer: dict, pretty: bool):
    """The document text, the [start, end) of each event, the array's '[' and ']' positions and
    the position of each trailing member's terminator."""
    enc = (lambda v: msgspec.json.format(ENC.encode(v), indent=1)) if pretty else ENC.encode
    out = bytearray(b"{")
    for k, v in header.items():
        out += enc(k) + b": " + enc(v) + b",\n"
    out += b'"traceEvents": ['
    open_pos = len(out) - 1
    spans = []
    for i, e in enumerate(events):
        if i:
            out += b",\n  "
        start = len(out)
        out += enc(e)
        spans.append((start, len(out)))
    close_pos = len(out)
    out += b"]"
    terminators = []
    for k, v in trailer.items():
        out += b", " + enc(k) + b": " + enc(v)
        terminators.append(len(out))  # the next ',' or the final '}'
    out += b"}"
    return bytes(out), spans, open_pos, close_pos, terminators


@fuzz_settings(5600)
@given(seed=st.integers(0, 2**32), n=st.integers(0, 6), pretty=st.booleans(), where=st.floats(0, 1))
def test_scan_recovers_exactly_the_complete_events(seed, n, pretty, where):
    rng = random.Random(seed)
    header = _members(rng)
    events = [_event(rng) for _ in range(n)]
    trailer = _members(rng, avoid=header)
    text, spans, open_pos, close_pos, terms = _build(header, events, trailer, pretty)
    cut = int(where * len(text))
    sc = scan(text[:cut])
    if cut <= open_pos:
        assert sc is None or not sc.events
        return
    assert sc is not None
    k = sum(1 for _, end in spans if end <= cut)
    assert len(sc.events) == k
    n_trailer = sum(1 for t in terms if t < cut) if cut > close_pos else 0
    assert len(sc.trailer) == n_trailer
    doc = msgspec.json.decode(rebuild(text[:cut], sc, k, sc.trailer)[0])
    original = msgspec.json.decode(text)
    assert doc["traceEvents"] == original["traceEvents"][:k]
    assert {key: doc[key] for key in header} == {key: original[key] for key in header}
    assert [key for key in doc if key not in header and key != "traceEvents"] == list(trailer)[:n_trailer]


@fuzz_settings(1500)
@given(seed=st.integers(0, 2**32), n=st.integers(0, 40), where=st.floats(0, 1), level=st.integers(1, 9))
def test_tolerant_gunzip_gives_a_prefix(scratch, seed, n, where, level):
    rng = random.Random(seed)
    text, spans, *_ = _build({"schemaVersion": 1}, [_event(rng) for _ in range(n)], {}, False)
    data = gzip.compress(text, compresslevel=level, mtime=0)
    cut = int(where * len(data))
    path = scratch / "tolerant.json.gz"
    path.write_bytes(data[:cut])
    try:
        out, source = read_text(path, tolerant=True)
    except TraceError as exc:  # nothing at all: an empty file
        assert cut == 0 and exc.kind is TraceErrorKind.EMPTY
        return
    used, problem = source.compressed_used, source.damage.problem if source.damage else None
    assert text.startswith(out) and used <= cut
    assert problem is None or problem.startswith("truncated gzip")
    if cut == len(data):
        assert out == text and problem is None
    sc = scan(out)
    if sc is not None:
        assert len(sc.events) == sum(1 for _, end in spans if end <= len(out))


# ------------------------------------------------------------------ read_trace on damaged bytes

T0 = 1_700_000_000_000_000
_NAMES = ["ProfilerStep#0", "ProfilerStep#1", "PP:0F0", "PP:0B0", "aten::mm", "[memory]",
          "cudaLaunchKernel", 'x{"]', "ProfilerStep#99999999999999999999"]


def _trace_doc(rng: random.Random, n: int) -> dict:
    events = []
    for _ in range(n):
        e = {"ph": rng.choice("XXXisM"), "name": rng.choice(_NAMES), "ts": rng.randint(T0, T0 + 500),
             "pid": rng.choice([1, "Spans"]), "tid": 1}
        if rng.random() < 0.8:
            e["dur"] = rng.randint(0, 300)
        if rng.random() < 0.7:
            e["cat"] = rng.choice(["cpu_op", "kernel", "cuda_runtime", "user_annotation"])
        if rng.random() < 0.3:
            e["args"] = {rng.choice(["correlation", "Total Allocated"]): rng.randint(0, 5)}
        events.append(e)
    return {"schemaVersion": 1, "distributedInfo": {"backend": "gloo", "rank": 0, "world_size": 1},
            "baseTimeNanoseconds": rng.choice([0, 1_000_000_000]), "traceEvents": events,
            "traceName": "t"}


def _damage(rng: random.Random, text: bytearray, times: int) -> bytes:
    for _ in range(times):
        how = rng.choice(["cut", "flip", "insert", "delete", "zeros"])
        at = rng.randint(0, max(len(text) - 1, 0))
        if how == "cut":
            del text[at:]
        elif how == "flip" and text:
            text[at] = rng.choice(b'{}[]",:\\0 x\xff\x00')
        elif how == "insert":
            text[at:at] = rng.choice([b"{", b"}", b"]", b'"', b",", b"\\", b"NaN", b"\xc3", b"-Infinity"])
        elif how == "delete":
            del text[at:at + rng.randint(1, 4)]
        else:
            text[at:] = b"\x00" * max(len(text) - at, 1)
    return bytes(text)


@fuzz_settings(2600)
@given(seed=st.integers(0, 2**32), n=st.integers(1, 10), times=st.integers(1, 3), pretty=st.booleans(),
       gz=st.booleans(), salvage=st.booleans())
def test_read_trace_on_damaged_bytes_raises_only_trace_errors(scratch, seed, n, times, pretty, gz,
                                                              salvage):
    rng = random.Random(seed)
    doc = _trace_doc(rng, n)
    text = msgspec.json.format(ENC.encode(doc), indent=1 if pretty else 0)
    data = _damage(rng, bytearray(text), times)
    if gz:
        data = gzip.compress(data, mtime=0)
        data = data[: rng.randint(len(data) // 2, len(data))]
    path = scratch / ("rank0.json.gz" if gz else "rank0.json")
    path.write_bytes(data)
    try:
        rt = read_trace(path, salvage=salvage)
    except TraceError as exc:
        msg = str(exc)
        assert msg.startswith(f"{path}: ") and "\n" not in msg and len(msg) < 600
        return
    assert rt.events["ts"].is_sorted() and (rt.events["dur"] >= 0).all()
    if rt.salvage is not None:
        assert rt.salvage.end_ns is not None and rt.warnings
        assert (rt.events["ts"] + rt.events["dur"] <= rt.salvage.end_ns).all() or rt.salvage.all_events
