"""The compiled scanner: where it answers, its columns are the msgspec path's, exactly; where
the msgspec path fails (or needs Python to parse a value), it does not answer."""

from __future__ import annotations

import os
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeaudit.errors import TraceError
from pipeaudit.trace import scanner
from pipeaudit.trace.decode import ALL_COLUMNS, DROPPED_CATEGORIES, TableParts, check_columns
from pipeaudit.trace.schema import batch_decoder
from pipeaudit.trace.scanner import scan_batch
from tests.support.paths import SAMPLES

needs_scanner = pytest.mark.skipif(not scanner.available(), reason="compiled scanner not built (or turned off)")

FULL = frozenset(ALL_COLUMNS)
LEAN = check_columns(["tid", "correlation"])


def _reference(data: bytes, columns: frozenset[str]):
    """The msgspec path on the same batch: TableParts' frames, or the error text."""
    try:
        events = batch_decoder(columns).decode(b"[" + data + b"]")
        parts = TableParts(columns)
        parts.add(Path("t.json"), events)
    except (msgspec.DecodeError, msgspec.ValidationError, TraceError) as exc:
        return str(exc)
    return parts


def _check(data: bytes, columns: frozenset[str]) -> bool:
    """Scanner against msgspec on one batch; True when the scanner answered."""
    got = scan_batch(data, columns, DROPPED_CATEGORIES)
    if got is None:
        return False
    want = _reference(data, columns)
    assert not isinstance(want, str), f"scanner answered where msgspec fails: {want}"
    assert got.complete.equals(want.complete[0]), (got.complete, want.complete[0])
    assert got.memory.equals(want.memory[0])
    assert got.device_types == want.device_types
    n_events = len(msgspec.json.decode(b"[" + data + b"]", type=list[msgspec.Raw]))
    assert (got.begin_end, got.n_events) == (want.begin_end, n_events)
    return True


@needs_scanner
def test_known_answers() -> None:
    data = (b'{"ph": "X", "cat": "cpu_op", "name": "aten::mm \xe2\x9c\x93", "pid": "Spans", "tid": 7,'
            b' "ts": 1712195495519695.8, "dur": 0.125, "args": {"correlation": 42, "External id": -3}},\n'
            b' {"ph": "X", "cat": "python_function", "name": "f", "ts": 1, "dur": 1},\n'
            b' {"ph": "i", "name": "[memory]", "ts": 5, "args": {"Total Allocated": 1024, "Device Type": 1}},'
            b' {"ph": "B", "name": "b", "ts": 2}, {"ph": "X", "name": "no cat", "ts": 3}')
    got = scan_batch(data, FULL, DROPPED_CATEGORIES)
    assert got is not None and (got.n_events, got.begin_end) == (5, 1)
    df = got.complete
    assert df["name"].to_list() == ["aten::mm ✓", "no cat"]
    assert df["ts"].to_list() == [1712195495519695800, 3000]  # exact: a float64 would give ...695750
    assert df["dur"].to_list() == [125, None]
    assert df["pid"].to_list() == ["Spans", ""] and df["tid"].to_list() == ["7", ""]
    assert df["correlation"].to_list() == [42, None] and df["external_id"].to_list() == [-3, None]
    assert got.memory["total_allocated"].to_list() == [1024] and got.device_types == [1]
    assert _check(data, FULL) and _check(data, LEAN)


@needs_scanner
def test_nccl_p2p_metadata_columns() -> None:
    """torch copies record_param_comms' metadata onto NCCL kernels: ``Src Rank`` (recv),
    ``Dst Rank`` (send) and ``Seq`` become the src_rank, dst_rank and seq columns."""
    data = (b'{"ph": "X", "cat": "kernel", "name": "ncclDevKernel_SendRecv", "ts": 10, "dur": 5,'
            b' "args": {"Collective name": "recv", "Src Rank": 3, "Seq": 41, "stream": 20}},'
            b' {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_SendRecv", "ts": 20, "dur": 5,'
            b' "args": {"Collective name": "send", "Dst Rank": 5, "Seq": 42}},'
            b' {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 30, "dur": 5}')
    got = scan_batch(data, FULL, DROPPED_CATEGORIES)
    assert got is not None
    df = got.complete
    assert df["src_rank"].to_list() == [3, None, None]
    assert df["dst_rank"].to_list() == [None, 5, None]
    assert df["seq"].to_list() == [41, 42, None]
    assert _check(data, FULL) and _check(data, LEAN)


@needs_scanner
@pytest.mark.parametrize("data", [
    b'{"ph": "X", "name": "a", "ts": 1.2345}',             # four decimals: rounding left to polars
    b'{"ph": "X", "name": "a", "ts": 1e3}',                # exponent
    b'{"ph": "X", "name": "a\\u00e9", "ts": 1}',            # escaped kept string
    b'{"ph": "X", "name": "a", "ts": "1"}',                # ts as a string: the decoder's error
    b'{"ph": "X", "name": null, "ts": 1}',                 # wrong type for a str field
    b'{"ph": "X", "name": "a", "ts": 1, "ts": 2}',         # duplicate key
    b'{"ph": "X", "name": "a", "ts": 1, "args": {"correlation": "0x1"}}',  # integer text
    b'{"ph": "X", "name": "a", "ts": 1, "args": []}',      # args not an object
    b'{"ph": "X", "name": "a", "ts": 1}, ',                # not cut at an event's end
    b'{"ph": "X", "name": "a", "ts": 1}, {"ph": "X", "na',  # cut inside an event
    b'{"ph": "X", "name": "a", "ts": 01}',                 # not JSON
    b'{"ph": "X", "name": "a\x01", "ts": 1}',              # raw control character
    b'{"x": "\\ud800"}',                                   # lone surrogate escape
    b'[1]',                                               # not an object
    b'{"ph": "X", "name": "\xff", "ts": 1}',               # kept string not UTF-8
    b'{"ph": "X", "ts": 99999999999999999}',               # beyond 2**62 ns
    b'{"ph": "X", "ts": 1, "args": {"correlation": 1e999}}',  # msgspec: out of range
    b'{"x": ' + b"[" * 80 + b"]" * 80 + b"}",               # deep nesting
    b"   ",
])
def test_does_not_answer(data: bytes) -> None:
    assert scan_batch(data, FULL, DROPPED_CATEGORIES) is None


@needs_scanner
def test_lean_columns_ignore_args_they_do_not_read() -> None:
    """ROCm writes ``"stream": "0x0"``: the lean columns do not read it, the full ones must
    parse it in Python."""
    data = b'{"ph": "X", "name": "k", "ts": 1, "args": {"stream": "0x0", "correlation": 9}}'
    assert scan_batch(data, FULL, DROPPED_CATEGORIES) is None
    assert _check(data, LEAN)


# --------------------------------------------------------------------------- fuzz

_numbers = st.one_of(
    st.integers(-(2**63), 2**63).map(str),
    st.decimals(min_value=-(2**52), max_value=2**53, places=3, allow_nan=False, allow_infinity=False).map(
        lambda d: format(d, "f")),
    st.sampled_from(["0", "-0", "0.5", "1.50", "1.000", "1.0001", "1e3", "2E-2", "-1.5e+2", "00", "1.", ".5",
                     "-", "1712195495519695.8", "4611686018427387.904", "9999999999999999.999"]),
)
_strings = st.one_of(
    st.text(max_size=6).map(lambda s: msgspec.json.encode(s).decode()),
    st.sampled_from(['"X"', '"i"', '"I"', '"B"', '"E"', '"[memory]"', '"python_function"', '"cpu_op"', '""',
                     '"\\u0058"', '"a\\nb"', '"\\ud83d\\ude00"', '"tab\there"']),
)
_scalars = st.one_of(_numbers, _strings, st.sampled_from(["null", "true", "false", "[]", "{}", '[1, {"a": [2]}]']))
_ws = st.sampled_from(["", " ", "\n    ", "\t", "\r\n"])
_keys = st.sampled_from(["ph", "ph", "name", "cat", "ts", "ts", "dur", "pid", "tid", "args", "Input Dims", "s"])
_arg_keys = st.sampled_from(["correlation", "External id", "stream", "device", "Total Allocated", "Device Id",
                             "Device Type", "Input Dims", "correlation"])


@st.composite
def _event(draw) -> str:
    members = []
    for key in draw(st.lists(_keys, max_size=7)):
        if key == "args" and draw(st.booleans()):
            args = [f'"{k}":{draw(_ws)}{draw(_scalars)}' for k in draw(st.lists(_arg_keys, max_size=4))]
            value = "{" + ",".join(args) + "}"
        elif key == "ph":
            value = draw(st.sampled_from(['"X"', '"X"', '"i"', '"B"', '"M"'])) if draw(st.booleans()) else draw(_scalars)
        elif key in ("ts", "dur"):
            value = draw(_numbers) if draw(st.booleans()) else draw(_scalars)
        else:
            value = draw(_scalars)
        members.append(f'{draw(_ws)}"{key}"{draw(_ws)}:{draw(_ws)}{value}')
    return "{" + ",".join(members) + draw(_ws) + "}"


def _unescaped(s: str) -> bool:
    """JSON writes this string without a backslash escape."""
    return s.isprintable() and '"' not in s and "\\" not in s


def _us(ns: int) -> msgspec.Raw:
    return msgspec.Raw(f"{ns // 1000}.{ns % 1000:03d}".encode())


@st.composite
def _plain_event(draw) -> str:
    """What real traces hold: the scanner must answer these."""
    ph = draw(st.sampled_from(["X", "X", "i", "M"]))
    name = "[memory]" if ph == "i" else draw(st.text(max_size=8).filter(_unescaped))
    e = {"ph": ph, "name": name, "cat": draw(st.sampled_from(["cpu_op", "kernel", "python_function"])),
         "tid": draw(st.integers(0, 2**31) | st.sampled_from(["Spans", "stream 7"])),
         "ts": _us(draw(st.integers(0, 2**50))), "dur": _us(draw(st.integers(0, 2**30))),
         "args": {"correlation": draw(st.integers(0, 2**40)), "Total Allocated": draw(st.integers(0, 2**40)),
                  "Device Type": draw(st.integers(0, 1)), "Input Dims": [[1, 2], []]}}
    return msgspec.json.encode(e).decode()


SETTINGS = settings(max_examples=int(os.environ.get("PIPEAUDIT_FUZZ_EXAMPLES", "60")) * 2, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@needs_scanner
@SETTINGS
@given(events=st.lists(_event(), min_size=1, max_size=5), sep=_ws, cut=st.none() | st.integers(0, 200),
       lean=st.booleans())
def test_fuzz_never_differs_from_msgspec(events: list[str], sep: str, cut: int | None, lean: bool) -> None:
    data = ("," + sep).join(events).encode()
    _check(data if cut is None else data[:cut], LEAN if lean else FULL)


@needs_scanner
@SETTINGS
@given(events=st.lists(_plain_event(), min_size=1, max_size=8), lean=st.booleans())
def test_fuzz_answers_plain_events(events: list[str], lean: bool) -> None:
    assert _check(",\n  ".join(events).encode(), LEAN if lean else FULL)


def _accumulated(batches: list[bytes], columns: frozenset[str]):
    """One Scanner over ``batches`` in turn: what it took, and which batches it answered."""
    state = scanner.new_scanner(columns, DROPPED_CATEGORIES)
    answered = [state.scan(b) is not None for b in batches]
    assert state.pending == sum(len(msgspec.json.decode(b"[" + b + b"]", type=list[msgspec.Raw]))
                                for b, ok in zip(batches, answered) if ok)
    return (scanner.to_batch(state.take(), columns) if any(answered) else None), answered


@needs_scanner
@SETTINGS
@given(batches=st.lists(st.tuples(st.lists(_event(), min_size=1, max_size=3), st.booleans()), min_size=1,
                        max_size=6),
       lean=st.booleans())
def test_fuzz_batches_on_one_scanner(batches: list[tuple[list[str], bool]], lean: bool) -> None:
    """The batches of a file accumulate on one Scanner: a refused batch (interning strings it
    then takes back, a rehash of the string table on the way) leaves no trace, and what is
    taken is the answered batches' one-shot columns, concatenated."""
    import polars as pl

    columns = LEAN if lean else FULL
    data = [",".join(events).encode() for events, _ in batches]
    # plain events between them, with many distinct strings (the table rehashes)
    plain = [",".join(f'{{"ph": "X", "name": "s{i}-{j}", "cat": "cpu_op", "ts": {j}, "dur": 1}}'
                      for j in range(300)).encode() for i, (_, add) in enumerate(batches) if add]
    texts = [t for pair in zip(data, plain + [b""] * len(data)) for t in pair if t]
    got, answered = _accumulated(texts, columns)
    one_shot = [scan_batch(t, columns, DROPPED_CATEGORIES) for t in texts]
    assert answered == [b is not None for b in one_shot]
    kept = [b for b in one_shot if b is not None]
    if not kept:
        return
    assert got.complete.equals(pl.concat([b.complete for b in kept]))
    assert got.memory.equals(pl.concat([b.memory for b in kept]))
    assert got.device_types == [v for b in kept for v in b.device_types]
    assert (got.begin_end, got.n_events) == (sum(b.begin_end for b in kept), sum(b.n_events for b in kept))


@needs_scanner
def test_scanner_refuses_a_batch_without_a_trace_and_takes_again() -> None:
    """A refused batch interns strings (one not UTF-8) that are dropped with it; after a
    take the columns start empty and the strings keep their codes."""
    state = scanner.new_scanner(FULL, DROPPED_CATEGORIES)
    assert state.scan(b'{"ph": "X", "name": "a", "ts": 1, "dur": 2}') == 1
    assert state.scan(b'{"ph": "X", "name": "new", "ts": 1}, {"ph": "X", "name": "\xff", "ts": 2}') is None
    assert state.scan(b'{"ph": "X", "name": "b", "ts": 3, "dur": 4}, {"ph": "X", "name": "a", "ts": 5}') == 2
    first = scanner.to_batch(state.take(), FULL)
    assert first.complete["name"].to_list() == ["a", "b", "a"] and state.pending == 0
    assert state.scan(b'{"ph": "X", "name": "b", "ts": 6, "dur": 1}') == 1
    second = state.take()
    assert second["strings"][:2] == ["a", ""] and "new" not in second["strings"]
    assert scanner.to_batch(second, FULL).complete["name"].to_list() == ["b"]
    assert state.take()["n_events"] == 0


def test_built_where_required() -> None:
    """CI sets PIPEAUDIT_REQUIRE_SCANNER: there the C compiler is present and the scanner
    must have been built by the install (a silent fallback would only be slower)."""
    if os.environ.get("PIPEAUDIT_REQUIRE_SCANNER"):
        from pipeaudit.trace import _kscan  # noqa: F401


# --------------------------------------------------------------------------- without the scanner


@pytest.mark.parametrize("run", ["1f1b_p4_m8_imb_s1x3", "interleaved-1f1b_p4_m8_v2", "1f1b_p2_m4_memory"])
def test_same_audit_without_the_scanner(run: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a machine without a C compiler computes (msgspec alone) is what the scanner's
    machines compute: the same audit, and the same streamed tables rank by rank."""
    import pipeaudit
    from pipeaudit.trace import ReadOptions, Tokenizer
    from pipeaudit.trace.decode import decode_file

    def read(path, tokenizer):
        options = ReadOptions(tokenizer=tokenizer, batch_bytes=50_000, max_event_bytes=1 << 20)
        return decode_file(path, options)

    with_scanner = pipeaudit.load(SAMPLES / run, jobs=1).audit().to_dict()
    scanned = [read(p, Tokenizer.SCANNER) for p in sorted((SAMPLES / run).glob("rank*.json.gz"))]
    monkeypatch.setenv(scanner.DISABLE_ENV, "1")
    assert not scanner.available()
    assert pipeaudit.load(SAMPLES / run, jobs=1).audit().to_dict() == with_scanner
    for rt in scanned:
        plain = read(rt.path, Tokenizer.MSGSPEC)
        assert rt.events.equals(plain.events) and rt.memory.equals(plain.memory)
        assert rt.warnings == plain.warnings
