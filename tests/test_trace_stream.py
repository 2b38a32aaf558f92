"""Streaming decode: the same RankTrace (or the same error) as the whole-file decode, in
bounded memory."""

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
from pipeaudit.trace import read_trace
from pipeaudit.trace.source import estimated_json_bytes
from pipeaudit.trace.stream import needs_streaming, read_trace_streaming
from pipeaudit.trace.synth import mem, simple_rank, trace, write, x

ROOT = Path(__file__).resolve().parents[1]
HTA = Path("/work/shared/traces/hta")
SAMPLES = ROOT / "sample_traces"
TORCH_CPU = Path(__file__).parent / "data" / "torch213_gloo_ws2"


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


@pytest.mark.parametrize("path", _files(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_same_result_as_whole_file(path: Path) -> None:
    whole = read_trace(path)
    # small batches (about 30 per file): many cuts, some inside args that must be retried
    batch = max(2000, estimated_json_bytes(path) // 30)
    _same(whole, read_trace_streaming(path, batch_bytes=batch))
    _same(whole, read_trace_streaming(path))
    cols = ["tid", "correlation"]
    _same(read_trace(path, columns=cols), read_trace_streaming(path, columns=cols, batch_bytes=batch * 3))


def test_max_memory_switches_to_streaming(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = write(tmp_path / "rank0.json", simple_rank(0))
    monkeypatch.setenv("PIPEAUDIT_NO_SCANNER", "1")
    assert not needs_streaming(p, 1 << 30) and needs_streaming(p, 100)
    _same(read_trace(p), read_trace(p, max_memory=100))


def test_streams_every_size_with_the_scanner(tmp_path: Path) -> None:
    """With the compiled scanner the streaming decode is the faster one at any size."""
    from pipeaudit.trace import scanner

    p = write(tmp_path / "rank0.json", simple_rank(0))
    assert needs_streaming(p, 1 << 30) == scanner.available()


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
        whole = read_trace(p)
        for batch in (1, 50, 400, 1 << 20):
            _same(whole, read_trace_streaming(p, batch_bytes=batch))


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
def test_same_error_as_whole_file(tmp_path: Path, content: bytes, gz: bool) -> None:
    p = tmp_path / ("bad.json.gz" if gz else "bad.json")
    p.write_bytes(gzip.compress(content) if gz else content)
    want = _outcome(read_trace, p)
    for batch in (1, 30, 1 << 20):
        got = _outcome(read_trace_streaming, p, batch_bytes=batch)
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
        want = _outcome(read_trace, p)
        got = _outcome(read_trace_streaming, p, batch_bytes=40)
        assert got == want if isinstance(want, str) else not isinstance(got, str), name
    assert _outcome(read_trace_streaming, tmp_path / "nope.json") == f"{tmp_path / 'nope.json'}: no such file or directory"


# --------------------------------------------------------------------------- fuzz

from tests.test_trace_fuzz import _write, good_traces, mutated_traces  # noqa: E402

SETTINGS = settings(max_examples=int(os.environ.get("PIPEAUDIT_FUZZ_EXAMPLES", "60")), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(doc=mutated_traces(), gz=st.booleans(), cut=st.none() | st.integers(0, 400), pretty=st.booleans(),
       batch=st.sampled_from([1, 20, 200, 1 << 20]))
def test_fuzz_same_outcome(doc, gz: bool, cut: int | None, pretty: bool, batch: int) -> None:
    path = _write(doc, gz, cut, pretty)
    want = _outcome(read_trace, path)
    got = _outcome(read_trace_streaming, path, batch_bytes=batch)
    if isinstance(want, str):
        assert got == want
    else:
        assert not isinstance(got, str), got
        _same(want, got)


@SETTINGS
@given(doc=good_traces(), pretty=st.booleans(), batch=st.sampled_from([1, 64, 1 << 20]))
def test_fuzz_good_traces(doc, pretty: bool, batch: int) -> None:
    path = _write(doc, False, None, pretty)
    _same(read_trace(path), read_trace_streaming(path, batch_bytes=batch))


# --------------------------------------------------------------------------- memory

# Peak RSS of the child from VmHWM: ru_maxrss would do, but Linux carries the parent's
# high-water mark into a forked child (and through exec), so a big pytest process would hide
# the child's own peak; VmHWM belongs to the new address space that exec creates.
_CHILD = """
import sys
sys.path.insert(0, {root!r})
from pipeaudit.trace import read_trace
from pipeaudit.trace.stream import read_trace_streaming

def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) // 1024

before = hwm()
rt = read_trace_streaming(sys.argv[1]) if sys.argv[2] == "stream" else read_trace(sys.argv[1])
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
def test_streaming_memory_is_bounded(tmp_path: Path) -> None:
    """A 210 MB (JSON) trace: the whole-file decode peaks at several times the JSON size;
    the streaming decode holds the finished columns plus a few batches, well below it."""
    path = tmp_path / "big.json.gz"
    json_mb = _generate(path, 600_000) / 1e6
    peaks = {}
    for mode in ("stream", "whole"):
        out = subprocess.run([sys.executable, "-c", _CHILD.format(root=str(ROOT)), str(path), mode],
                             check=True, capture_output=True, text=True).stdout.split()
        assert int(out[0]) == 600_000
        peaks[mode] = int(out[2]) - int(out[1])  # MB above the interpreter with its imports
        table_mb = int(out[3])
    print(f"JSON {json_mb:.0f} MB, peak RSS above imports: {peaks}")
    assert json_mb > 200
    assert peaks["whole"] > 2 * json_mb
    assert peaks["stream"] < 2 * table_mb + 64  # the columns (sort copy) and the batches
    assert peaks["stream"] < 0.75 * json_mb and peaks["stream"] < peaks["whole"] / 4


@pytest.mark.parametrize("path", _files(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_lean_decode_builds_the_same_columns(path: Path) -> None:
    """The analysis columns come from the lean Structs (no pid, fewer args keys): the same
    values as the full decode, whole-file and streamed."""
    from pipeaudit.trace.decode import check_columns
    from pipeaudit.trace.schema import is_lean

    lean_columns = ("tid", "correlation")
    assert is_lean(check_columns(lean_columns)) and not is_lean(check_columns(None))
    full = _outcome(read_trace, path)
    for lean in (_outcome(read_trace, path, columns=lean_columns),
                 _outcome(read_trace_streaming, path, columns=lean_columns)):
        if isinstance(full, str):
            assert lean == full
            continue
        assert lean.events.equals(full.events.select(lean.events.columns))
        assert lean.memory.equals(full.memory) and lean.header == full.header
        assert set(lean.warnings) <= set(full.warnings)


def test_invalid_utf8_is_repaired_as_the_whole_file_decode_does(tmp_path: Path) -> None:
    """A name with bytes that are not UTF-8 (once an internal error when streamed)."""
    doc = trace([x("ProfilerStep#1", 1000, 900), x("aten::mm", 1001, 5), x("PP:F0", 1002, 3)])
    data = msgspec.json.encode(doc).replace(b"aten::mm", b"aten::\xff\xfemm")
    p = tmp_path / "rank0.json"
    p.write_bytes(data)
    whole = read_trace(p)
    assert "2 invalid UTF-8 byte sequences in strings replaced by U+FFFD" in whole.warnings
    for batch in (64, 1 << 20):
        _same(whole, read_trace_streaming(p, batch_bytes=batch))
    with pytest.raises(UnicodeDecodeError):
        read_trace_streaming(p, repair_utf8=False)
    _same(whole, read_trace(p, max_memory=1 << 30))  # streamed for speed, then whole-file
