"""One reading pipeline: the same RankTrace (or the same error, with the same byte offsets)
whatever the batch size (1 byte to the whole file) and the tokenizer (compiled scanner or
msgspec), in bounded memory."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeaudit.errors import TraceError
from pipeaudit.trace import ReadOptions, Tokenizer, read_trace, scanner
from pipeaudit.trace.decode import decode_file
from pipeaudit.trace.source import estimated_json_bytes
from tests.support.synth import mem, simple_rank, trace, write, x
from tests.support.paths import REPO, TORCH_CPU, HTA, SAMPLES

TOKENIZERS = [Tokenizer.MSGSPEC] + ([Tokenizer.SCANNER] if scanner.available() else [])
WHOLE = 1 << 40  # a batch bigger than any file: the whole array at once


def read_batched(path, *, batch_bytes: int = 4 << 20, tokenizer: Tokenizer = Tokenizer.MSGSPEC,
                 columns=None):
    """``read_trace`` with explicit options: this batch size and tokenizer."""
    options = ReadOptions(tokenizer=tokenizer, batch_bytes=batch_bytes, max_event_bytes=64 << 20)
    return decode_file(path, options, columns=columns)


def _files() -> list[Path]:
    out = sorted(TORCH_CPU.glob("*.json.gz"))
    out += sorted(SAMPLES.glob("*/rank*.json.gz"))[:: 3]
    if HTA.is_dir():
        out += sorted(HTA.glob("*.json.gz"))
    return out


def _same(a, b) -> None:
    assert a.events.equals(b.events) and a.memory.equals(b.memory)
    assert (a.rank, a.rank_source, a.world_size, a.backend, a.device_type, a.base_ns, a.header,
            a.size_bytes, a.warnings) == (b.rank, b.rank_source, b.world_size, b.backend,
                                          b.device_type, b.base_ns, b.header, b.size_bytes, b.warnings)


def _outcome(fn, path: Path, **kw):
    try:
        return fn(path, **kw)
    except TraceError as exc:
        return str(exc)


@pytest.mark.parametrize("tokenizer", TOKENIZERS, ids=lambda t: t.value)
@pytest.mark.parametrize("path", _files(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_same_result_whatever_the_batch_size(path: Path, tokenizer: Tokenizer) -> None:
    whole = read_batched(path, batch_bytes=WHOLE, tokenizer=Tokenizer.MSGSPEC)
    _same(whole, read_trace(path))
    # small batches (about 30 per file): many cuts, some inside args that must be retried
    batch = max(2000, estimated_json_bytes(path) // 30)
    _same(whole, read_batched(path, batch_bytes=batch, tokenizer=tokenizer))
    _same(whole, read_batched(path, tokenizer=tokenizer))
    cols = ["tid", "correlation"]
    _same(read_batched(path, batch_bytes=WHOLE, columns=cols),
          read_batched(path, columns=cols, batch_bytes=batch * 3, tokenizer=tokenizer))


def test_options_follow_the_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reader's options are explicit and come from the memory budget."""
    small, big = ReadOptions.for_budget(100), ReadOptions.for_budget(8 << 30)
    assert (small.batch_bytes, small.max_event_bytes) == (1 << 20, 1 << 20)
    assert (big.batch_bytes, big.max_event_bytes) == (4 << 20, 64 << 20)
    assert big.tokenizer is (Tokenizer.SCANNER if scanner.available() else Tokenizer.MSGSPEC)
    assert big.describe() == f"{big.tokenizer.value}, 4 MiB batches"
    assert ReadOptions.for_budget(None, salvage=True).describe().endswith(", salvage")
    monkeypatch.setenv("PIPEAUDIT_NO_SCANNER", "1")
    assert ReadOptions.for_budget(8 << 30).tokenizer is Tokenizer.MSGSPEC


def test_pretty_printed_and_odd_layouts(tmp_path: Path) -> None:
    events = [x("ProfilerStep#1", 1_000_000.5, 900), x("a}, {b", 1_000_001, 5, external_id=3),
              x('q"},{"', 1_000_002, 1, cat="cpu_op"), mem(1_000_003, 77), x("c", 1_000_004.25, 2)]
    for i in range(40):
        events.append(x(f"op{i}", 1_000_010 + i, 1, correlation=i))
    doc = trace(events, rank=1, world_size=2, base_ns=10**18)
    doc["trailing"] = {"list": [{"a": 1}, {"b": "}, {"}]}
    text = json.dumps(doc, indent=3)
    for name, data in [("pretty.json", text.encode()), ("compact.json", json.dumps(doc).encode()),
                       ("bom.json.gz", gzip.compress(b"\xef\xbb\xbf" + text.encode())),
                       ("members.json.gz", gzip.compress(text[:300].encode()) + gzip.compress(text[300:].encode()))]:
        p = tmp_path / name
        p.write_bytes(data)
        whole = read_batched(p, batch_bytes=WHOLE)
        for tokenizer in TOKENIZERS:
            for batch in (1, 50, 400, 1 << 20):
                _same(whole, read_batched(p, batch_bytes=batch, tokenizer=tokenizer))


BAD = [
    b"", b"  \n", b"hello", b'{"traceEvents": [', b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1}',
    b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1}]', b'{"traceEvents": []}}',
    b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1}, {"ph": "X", "name": "b", "ts": 2}]} x',
    b"[1, 2]", b'{"schemaVersion": 1}', b'{"traceEvents": {"a": 1}}', b'{"traceEvents": [1]}',
    b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1}, {"ph": "X", "name": 5, "ts": 1}]}',
    b'{"traceEvents": [{"ph": "X", "name": "a", "ts": "12"}]}',
    b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1}, {"ph": "X", "name": "b", "ts": 2, "dur": null}]}',
    b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": "x"}, {"ph": "X", "name": "b", "ts": "y"}]}',
    b'{"traceEvents": [{"ph": "i", "name": "[memory]", "ts": {}}, {"ph": "X", "name": "b", "ts": [1]}]}',
    b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1}, {"ph": "X", "name": "b" "ts": 2}]}',
    b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1}, {"ph": "X", "name": "b", "ts": 2}], "x": tru}',
    b'{"distributedInfo": [0], "traceEvents": [{"ph": "X", "name": "a", "ts": "1"}]}',
    b'{"traceEvents": [{"ph": "X", "name": "a", "ts": "1"}], "baseTimeNanoseconds": -1}',
    b'{"traceEvents": [], "distributedInfo": {"rank": 4, "world_size": 4}}',
    b'{"a": {"traceEvents": []}, "traceEvents": [{"ph": "X", "name": "a", "ts": 1}]}',
    b'{"a": "\\"traceEvents\\": [", "traceEvents": [{"ph": "X", "name": "a", "ts": 1}]}',
]


@pytest.mark.parametrize("content", BAD)
@pytest.mark.parametrize("gz", [False, True])
def test_same_error_whatever_the_batch_size(tmp_path: Path, content: bytes, gz: bool) -> None:
    p = tmp_path / ("bad.json.gz" if gz else "bad.json")
    p.write_bytes(gzip.compress(content) if gz else content)
    want = _outcome(read_batched, p, batch_bytes=WHOLE)
    for tokenizer in TOKENIZERS:
        for batch in (1, 30, 1 << 20):
            got = _outcome(read_batched, p, batch_bytes=batch, tokenizer=tokenizer)
            assert got == want if isinstance(want, str) else not isinstance(got, str)


def test_gzip_errors_match(tmp_path: Path) -> None:
    data = gzip.compress(json.dumps(simple_rank(0)).encode())
    cases = {"trunc.json.gz": data[: len(data) // 2],
             "corrupt.json.gz": data[:12] + bytes(b ^ 0x5A for b in data[12:40]) + data[40:],
             "empty.json.gz": gzip.compress(b""), "garbage.json.gz": data + b"xx",
             "padded.json.gz": data + b"\0" * 100}
    for name, content in cases.items():
        p = tmp_path / name
        p.write_bytes(content)
        want = _outcome(read_batched, p, batch_bytes=WHOLE)
        got = _outcome(read_batched, p, batch_bytes=40)
        assert got == want if isinstance(want, str) else not isinstance(got, str), name
    assert _outcome(read_batched, tmp_path / "nope.json") == f"{tmp_path / 'nope.json'}: no such file or directory"


# --------------------------------------------------------------------------- fuzz

from tests.unit.trace.test_trace_fuzz import _write, good_traces, mutated_traces  # noqa: E402

SETTINGS = settings(max_examples=int(os.environ.get("PIPEAUDIT_FUZZ_EXAMPLES", "60")), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(doc=mutated_traces(), gz=st.booleans(), cut=st.none() | st.integers(0, 400), pretty=st.booleans(),
       batch=st.sampled_from([1, 20, 200, 1 << 20]), tokenizer=st.sampled_from(TOKENIZERS))
def test_fuzz_same_outcome(scratch, doc, gz: bool, cut: int | None, pretty: bool, batch: int,
                           tokenizer: Tokenizer) -> None:
    path = _write(scratch, doc, gz, cut, pretty)
    want = _outcome(read_batched, path, batch_bytes=WHOLE)
    got = _outcome(read_batched, path, batch_bytes=batch, tokenizer=tokenizer)
    if isinstance(want, str):
        assert got == want
    else:
        assert not isinstance(got, str), got
        _same(want, got)


@SETTINGS
@given(doc=good_traces(), pretty=st.booleans(), batch=st.sampled_from([1, 64, 1 << 20]),
       tokenizer=st.sampled_from(TOKENIZERS))
def test_fuzz_good_traces(scratch, doc, pretty: bool, batch: int, tokenizer: Tokenizer) -> None:
    path = _write(scratch, doc, False, None, pretty)
    _same(read_batched(path, batch_bytes=WHOLE), read_batched(path, batch_bytes=batch, tokenizer=tokenizer))


# --------------------------------------------------------------------------- memory

# Peak RSS of the child from VmHWM: ru_maxrss would do, but Linux carries the parent's
# high-water mark into a forked child (and through exec), so a big pytest process would hide
# the child's own peak; VmHWM belongs to the new address space that exec creates.
_CHILD = """
import sys
sys.path.insert(0, {root!r})
from pipeaudit.trace import ReadOptions, Tokenizer
from pipeaudit.trace.decode import decode_file

def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) // 1024

before = hwm()
rt = decode_file(sys.argv[1], ReadOptions.for_budget(256 << 20, tokenizer=Tokenizer(sys.argv[2])))
print(rt.events.height, before, hwm(), rt.events.estimated_size() // 2**20)
"""


def _generate(path: Path, n_events: int) -> int:
    """A gzip trace of ``n_events`` shape-heavy cpu ops (about 400 bytes of JSON each)."""
    enc = msgspec.json.Encoder()
    with gzip.open(path, "wb", compresslevel=1) as fh:
        fh.write(b'{"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 1},\n'
                 b' "baseTimeNanoseconds": 1700000000000000000, "traceEvents": [\n')
        size = 0
        for i in range(n_events):
            e = {"ph": "X", "cat": "cpu_op", "name": f"aten::op{i % 50}", "pid": 7, "tid": 7,
                 "ts": f"{i * 3}.{i % 1000:03d}", "dur": 1.5,
                 "args": {"External id": i, "Input Dims": [[64, 16, 64], [64, 64], []],
                          "Input type": ["float", "float", "Scalar"], "Concrete Inputs": ["", "", "1"],
                          "Input Strides": [[1024, 64, 1], [64, 1], []], "Record function id": 0,
                          "Sequence number": i, "Fwd thread id": 0, "Ev Idx": i}}
            line = enc.encode(e).replace(b'"ts":"', b'"ts":').replace(b'","dur"', b',"dur"')
            line = (b",\n  " if i else b"  ") + line
            fh.write(line)
            size += len(line)
        fh.write(b"\n]}\n")
    return size


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")
def test_memory_is_bounded(tmp_path: Path) -> None:
    """A 210 MB (JSON) trace: the decode holds the finished columns plus a few batches, well
    below the JSON size (a whole-file decode peaked at 3-4x it), with either tokenizer."""
    path = tmp_path / "big.json.gz"
    json_mb = _generate(path, 600_000) / 1e6
    assert json_mb > 200
    for tokenizer in TOKENIZERS:
        out = subprocess.run([sys.executable, "-c", _CHILD.format(root=str(REPO)), str(path),
                              tokenizer.value], check=True, capture_output=True, text=True).stdout.split()
        assert int(out[0]) == 600_000
        peak = int(out[2]) - int(out[1])  # MB above the interpreter with its imports
        table_mb = int(out[3])
        print(f"JSON {json_mb:.0f} MB, {tokenizer.value}: peak RSS above imports {peak} MB")
        assert peak < 2 * table_mb + 64  # the columns (sort copy) and the batches
        assert peak < 0.75 * json_mb


@pytest.mark.parametrize("path", _files(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_lean_decode_builds_the_same_columns(path: Path) -> None:
    """The analysis columns come from the lean Structs (no pid, fewer args keys): the same
    values as the full decode, with either tokenizer."""
    from pipeaudit.trace.decode import check_columns
    from pipeaudit.trace.schema import is_lean

    lean_columns = ("tid", "correlation")
    assert is_lean(check_columns(lean_columns)) and not is_lean(check_columns(None))
    full = _outcome(read_trace, path)
    for lean in [_outcome(read_batched, path, columns=lean_columns, tokenizer=t) for t in TOKENIZERS]:
        if isinstance(full, str):
            assert lean == full
            continue
        assert lean.events.equals(full.events.select(lean.events.columns))
        assert lean.memory.equals(full.memory) and lean.header == full.header
        assert set(lean.warnings) <= set(full.warnings)


def test_invalid_utf8_is_repaired_and_counted_the_same_way(tmp_path: Path) -> None:
    """Bytes that are not UTF-8, in a kept name and in the name of an event that is not
    kept (ph M): replaced and counted by the byte reader, so every tokenizer and batch size
    gives the same names and the same note (the scanner once said nothing about the second)."""
    doc = trace([x("ProfilerStep#1", 1000, 900), x("aten::mm", 1001, 5), x("PP:F0", 1002, 3),
                 {"ph": "M", "name": "thread_nameXX", "pid": 1, "tid": 1}])
    data = msgspec.json.encode(doc).replace(b"aten::mm", b"aten::\xff\xfemm").replace(b"nameXX", b"name\xc3")
    p = tmp_path / "rank0.json"
    p.write_bytes(data)
    whole = read_batched(p, batch_bytes=WHOLE)
    assert "3 invalid UTF-8 byte sequences in strings replaced by U+FFFD" in whole.warnings
    assert "aten::\ufffd\ufffdmm" in whole.events["name"].to_list()
    for tokenizer in TOKENIZERS:
        for batch in (1, 64, 1 << 20):
            _same(whole, read_batched(p, batch_bytes=batch, tokenizer=tokenizer))


def test_offsets_are_the_files_own_after_repairs(tmp_path: Path) -> None:
    """100k invalid bytes before a broken number: the message names the broken byte of the
    file, not a byte of the repaired text (three times as long), in every configuration."""
    clean = msgspec.json.encode(trace([x("a" * 100_000, 1000, 5)])).replace(b'"dur":5', b'"dur":5.x')
    p, q = tmp_path / "rank0.json", tmp_path / "clean.json"
    q.write_bytes(clean)
    p.write_bytes(clean.replace(b"a" * 100_000, b"\xff" * 100_000))  # same length, not UTF-8
    want = _outcome(read_batched, q, batch_bytes=WHOLE).replace(str(q), str(p))
    assert "invalid number (byte " in want and p.stat().st_size > 100_000
    for tokenizer in TOKENIZERS:
        for batch in (1, 1000, 1 << 20, WHOLE):
            assert _outcome(read_batched, p, batch_bytes=batch, tokenizer=tokenizer) == want


# --------------------------------------------------------------------------- both decoders, damaged real traces

_REAL = gzip.decompress((SAMPLES / "1f1b_p2_m4" / "rank0.json.gz").read_bytes())
_TOKENS = [b"{", b"}", b"[", b"]", b'"', b",", b":", b"\\", b"\\u00e9", b"\x00", b"\xff\xfe", b"\xc3",
           b"NaN", b"1e999", b"-0", b"null", b'"ts": 1, "ts": 2', b'"dur": -5', b"[" * 1200,
           b'"traceEvents": [],', b" " * 3000]


def _damaged(rng, text: bytes) -> bytes:
    out = bytearray(text)
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(out))
        how = rng.random()
        if how < 0.25:
            out[at] = rng.randrange(256)
        elif how < 0.55:
            out[at:at] = rng.choice(_TOKENS)
        elif how < 0.75:
            del out[at:at + rng.randint(1, 40)]
        elif how < 0.85:
            del out[at:]
        else:  # an event without dur
            i = out.find(b'"dur":', at)
            if i >= 0:
                del out[i:out.index(b",", i) + 1]
    return bytes(out)


@SETTINGS
@given(seed=st.integers(0, 2**32), gz=st.booleans())
def test_fuzz_decoders_agree_on_damaged_real_traces(scratch, seed: int, gz: bool) -> None:
    """A real harness trace damaged byte by byte: the scanner and msgspec, in batches of any
    size, give the same trace (same notes) or the same one-line error."""
    import random

    data = _damaged(random.Random(seed), _REAL)
    p = scratch / ("damaged.json.gz" if gz else "damaged.json")
    p.write_bytes(gzip.compress(data, compresslevel=1) if gz else data)
    want = _outcome(read_batched, p, batch_bytes=WHOLE, tokenizer=Tokenizer.MSGSPEC)
    for tokenizer, batch in [(t, b) for t in TOKENIZERS for b in (4 << 20, 3000)]:
        got = _outcome(read_batched, p, batch_bytes=batch, tokenizer=tokenizer)
        if isinstance(want, str):
            assert got == want, (tokenizer, batch)
        else:
            assert not isinstance(got, str), got
            _same(want, got)
