"""read_trace: one file -> RankTrace (columns, exact ns, rank, errors)."""

from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path

import polars as pl
import pytest

from pipeaudit.errors import TraceError
from pipeaudit.trace import EVENT_SCHEMA, MEMORY_SCHEMA, RankTrace, read_trace
from tests.support.synth import mem, simple_rank, trace, write, x
from pipeaudit.trace.timestamps import us_text_to_ns
from tests.support.paths import TORCH_CPU, HTA

_CACHE: dict[Path, RankTrace] = {}


def cached_read(path: Path) -> RankTrace:
    """read_trace once per file per session (the tests do not modify the tables)."""
    if path not in _CACHE:
        _CACHE[path] = read_trace(path)
    return _CACHE[path]


needs_hta = pytest.mark.skipif(not HTA.is_dir(), reason="shared HTA traces not present")


def _check_contract(rt: RankTrace) -> None:
    assert dict(rt.events.schema) == EVENT_SCHEMA
    assert rt.memory.columns == list(MEMORY_SCHEMA)
    assert rt.memory.schema["ts"] == pl.Int64
    assert rt.events["ts"].is_sorted()
    assert rt.events["ph"].unique().to_list() in ([], ["X"])
    assert rt.events["cat"].null_count() == 0 and rt.events["pid"].null_count() == 0
    assert (rt.events["dur"] >= 0).all()
    assert rt.device_type in ("cpu", "cuda", "rocm")
    assert rt.rank_source in ("distributedInfo", "hint", "filename", "default")


# --------------------------------------------------------------------------- real traces


@needs_hta
@pytest.mark.parametrize("path", sorted(HTA.glob("*.json.gz")), ids=lambda p: p.name)
def test_every_shared_trace_loads(path: Path) -> None:
    rt = cached_read(path)
    _check_contract(rt)
    assert rt.events.height > 0
    assert rt.size_bytes == path.stat().st_size
    assert "python_function" not in rt.events["cat"].to_list()


@needs_hta
def test_shared_trace_facts() -> None:
    a100 = cached_read(HTA / "a100_ddp_ws2_rank0.json.gz")
    assert (a100.rank, a100.world_size, a100.backend, a100.rank_source) == (0, 2, "nccl", "distributedInfo")
    assert a100.base_ns == 1711964646000000000 and a100.device_type == "cuda"
    # base + relative ts: the first step is at 2024-05-22 (the log lines say 17:15 local time)
    assert 1716336000 * 10**9 < a100.start_ns < 1716508800 * 10**9
    assert a100.header["deviceProperties"][0]["name"].startswith("NVIDIA A100")
    kernels = a100.events.filter(pl.col("cat") == "kernel")
    assert kernels["stream"].null_count() == 0 and kernels["correlation"].null_count() == 0
    assert kernels["device"].unique().to_list() == [0]

    amd = cached_read(HTA / "amd_mi250_no_rank.json.gz")
    assert (amd.rank, amd.rank_source, amd.world_size) == (0, "default", None)
    assert amd.device_type == "rocm"
    assert any("assuming rank 0" in w for w in amd.warnings)
    hip = amd.events.filter(pl.col("name") == "hipMemcpyWithStream")
    assert hip["stream"].to_list() == [0] * hip.height  # "0x0" parsed

    gloo = cached_read(HTA / "cpu_only_gloo_rank34.pt.trace.json.gz")
    assert (gloo.rank, gloo.world_size, gloo.backend, gloo.device_type) == (34, 300, "gloo", "cpu")

    memory = cached_read(HTA / "v100_ws2_rank1_with_memory.json.gz")
    assert (memory.rank, memory.world_size) == (1, 2)
    assert memory.memory.height == 28010
    assert dict(memory.memory.schema) == MEMORY_SCHEMA
    assert memory.memory["total_allocated"].max() == 6629508096
    # 26770 samples of GPU 1 (Device Type 1) and 1240 of host memory (Device Id -1, type 0)
    assert sorted(memory.memory.group_by("device_id", "device_type").len().rows()) == [(-1, 0, 1240), (1, 1, 26770)]

    nccl = cached_read(HTA / "nccl128_sampled_rank1.json.gz")
    assert (nccl.rank, nccl.world_size, nccl.base_ns) == (1, 128, 0)
    assert nccl.events["stream"].drop_nulls().n_unique() >= 4


def _oracle_ns(path: Path) -> tuple[list[int], list[int]]:
    """Independent exact reference: json with Decimal numbers."""
    doc = json.loads(gzip.decompress(path.read_bytes()), parse_float=Decimal, parse_int=Decimal)
    base = int(doc.get("baseTimeNanoseconds", 0))
    ts, dur = [], []
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") != "python_function":
            ts.append(base + int((e["ts"] * 1000).to_integral_value()))
            dur.append(int((e.get("dur", Decimal(0)) * 1000).to_integral_value()))
    return sorted(ts), sorted(dur)


@needs_hta
@pytest.mark.parametrize("name", ["v100_ddp_ns_resolution.pt.trace.json.gz"])
def test_float_timestamps_are_exact_ns(name: str) -> None:
    rt = cached_read(HTA / name)
    ts, dur = _oracle_ns(HTA / name)
    assert sorted(rt.events["ts"].to_list()) == ts
    assert sorted(rt.events["dur"].to_list()) == dur


@needs_hta
def test_ns_resolution_known_event() -> None:
    rt = cached_read(HTA / "v100_ddp_ns_resolution.pt.trace.json.gz")
    # the file says "ts": 1712195495519695.812, "dur": 53.090; as float64 that ts is
    # 1712195495519695.75 (and json.loads shows it as ...695.8)
    row = rt.events.filter((pl.col("name") == "DivBackward1") & (pl.col("external_id") == 2050))
    assert row["ts"].to_list() == [1712195495519695812]
    assert int(float("1712195495519695.812") * 1000) != 1712195495519695812
    assert row["dur"].to_list() == [53090]


def test_real_torch_cpu_trace() -> None:
    rt = read_trace(TORCH_CPU / "rank0_trace.json.gz")
    _check_contract(rt)
    assert (rt.rank, rt.world_size, rt.backend, rt.device_type) == (0, 2, "gloo", "cpu")
    assert rt.base_ns > 0 and rt.header["host_name"]
    assert rt.warnings == []
    names = set(rt.events["name"].to_list())
    assert {"PP:0F0", "PP:0F1", "c10d::send", "gloo:send"} <= names
    assert set(rt.events["cat"].unique().to_list()) == {"cpu_op", "user_annotation", "Trace"}
    assert rt.memory.height == 14 and rt.memory["device_id"].unique().to_list() == [-1]
    assert rt.events.filter(pl.col("cat") == "Trace")["pid"].to_list() == ["Spans"]


# --------------------------------------------------------------------------- exactness


def test_exact_ns_of_large_float_us(tmp_path: Path) -> None:
    p = write(tmp_path / "t.json", '{"traceEvents": [{"ph": "X", "name": "a", "ts": 1700000000123.456, '
                                   '"dur": 0.001, "pid": 1, "tid": 1}]}')
    rt = read_trace(p)
    assert rt.events["ts"].to_list() == [1700000000123456]
    assert rt.events["dur"].to_list() == [1]


def test_base_time_added_exactly(tmp_path: Path) -> None:
    base = 1711964646000000000
    p = write(tmp_path / "t.json", '{"baseTimeNanoseconds": %d, "traceEvents": [{"ph": "X", "name": "a", '
                                   '"ts": 4458676522690.655, "dur": 156.777, "pid": 1, "tid": 1}]}' % base)
    rt = read_trace(p)
    assert rt.base_ns == base
    assert rt.events["ts"].to_list() == [base + 4458676522690655]
    assert rt.events["dur"].to_list() == [156777]


@pytest.mark.parametrize(
    ("text", "ns"),
    [("0", 0), ("12", 12000), ("1.5", 1500), ("-0.5", -500), ("1.7e3", 1700000), ("1E-3", 1),
     ("1712195495519695.8", 1712195495519695800), ("4458676522690.655", 4458676522690655),
     ("4000000000000000.001", 4000000000000000001), ("1.0015", 1002)],
)
def test_us_text_to_ns(text: str, ns: int) -> None:
    assert us_text_to_ns(text) == ns


@pytest.mark.parametrize("text", ["9007199254740993", "1e300", '"1"', "null", "[]"])
def test_us_text_out_of_range_or_not_a_number(text: str) -> None:
    with pytest.raises(ValueError):
        us_text_to_ns(text)


# --------------------------------------------------------------------------- columns


def test_columns_and_filtering(tmp_path: Path) -> None:
    events = [
        x("b", 20, 5, pid="Spans", tid="Trace 1"),
        x("a", 10, 0, cat="kernel", pid=0, tid=7, correlation=3, stream=7, device=0, external_id=9),
        {"ph": "X", "name": "nocat", "ts": 15, "dur": 2, "pid": 1, "tid": 2, "args": None},
        {"ph": "X", "name": "nodur", "ts": 16, "pid": 1, "tid": 2},
        x("py", 11, 1, cat="python_function"),
        {"ph": "s", "id": 1, "pid": 1, "tid": 1, "ts": 10, "cat": "ac2g", "name": "ac2g"},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "x"}},
        {"ph": "i", "s": "g", "name": "Iteration Start: PyTorch Profiler", "pid": "Traces", "tid": "T", "ts": 9},
        mem(12, 4096, device_id=0),
        mem(11, 2048, device_id=0),
    ]
    rt = read_trace(write(tmp_path / "rank3.json", trace(events, rank=3, world_size=4)))
    _check_contract(rt)
    df = rt.events
    assert df["name"].to_list() == ["a", "nocat", "b"]
    assert df.row(0, named=True) == {
        "name": "a", "cat": "kernel", "ph": "X", "ts": 10000, "dur": 0, "pid": "0", "tid": "7",
        "correlation": 3, "external_id": 9, "stream": 7, "device": 0, "src_rank": None,
        "dst_rank": None, "seq": None,
    }
    assert df.row(1, named=True)["cat"] == "" and df.row(1, named=True)["correlation"] is None
    assert df.row(2, named=True)["pid"] == "Spans" and df.row(2, named=True)["tid"] == "Trace 1"
    assert rt.memory.rows() == [(11000, 2048, 0, 1), (12000, 4096, 0, 1)]
    assert rt.device_type == "cuda"
    # an X event without dur has no end: set aside and counted, never given a made-up 0
    assert rt.warnings == ["1 complete events without dur (their end is unknown) dropped (the first: 'nodur')"]


def test_same_start_parent_first(tmp_path: Path) -> None:
    rt = read_trace(write(tmp_path / "t.json", trace([x("child", 5, 1), x("parent", 5, 10)])))
    assert rt.events["name"].to_list() == ["parent", "child"]


def test_dropped_events_are_counted(tmp_path: Path) -> None:
    events = [x("ok", 1, 1), {"ph": "X", "name": "nots", "dur": 1}, x("neg", 2, -3),
              x("nodur1", 3, None), x("nodur2", 4, None),
              {"ph": "B", "name": "b", "ts": 1}, {"ph": "E", "name": "b", "ts": 2}]
    rt = read_trace(write(tmp_path / "t.json", trace(events, rank=0)))
    assert rt.events["name"].to_list() == ["ok"]
    assert "1 complete events without ts dropped (the first: 'nots')" in rt.warnings
    assert "2 complete events without dur (their end is unknown) dropped (the first: 'nodur1')" in rt.warnings
    assert "1 complete events with negative dur dropped (the first: 'neg')" in rt.warnings
    assert any("2 begin/end events (ph B/E) ignored" in w for w in rt.warnings)


def test_odd_arg_values_become_null(tmp_path: Path) -> None:
    events = [x("a", 1, 1, stream="0x1f"), x("b", 2, 1, stream="cuda:0"), x("c", 3, 1, stream=[1]),
              x("d", 4, 1, correlation=2**70)]
    rt = read_trace(write(tmp_path / "t.json", trace(events, rank=0)))
    assert rt.events["stream"].to_list() == [31, None, None, None]
    assert rt.events["correlation"].to_list() == [None] * 4
    assert "2 events with a non-integer args.stream (set to null)" in rt.warnings
    assert "1 events with a non-integer args.correlation (set to null)" in rt.warnings


def test_string_pid_with_escapes_and_empty_trace(tmp_path: Path) -> None:
    rt = read_trace(write(tmp_path / "t.json", trace([x("a", 1, 1, pid="a\"b\\u00e9", tid=None)])))
    assert rt.events["pid"].to_list() == ['a"b\\u00e9']
    assert rt.events["tid"].to_list() == [""]
    empty = read_trace(write(tmp_path / "e.json", trace([])))
    assert empty.events.height == 0 and dict(empty.events.schema) == EVENT_SCHEMA
    assert empty.memory.height == 0 and empty.start_ns is None
    assert "the trace has no events" in empty.warnings


def test_memory_device_type_as_text(tmp_path: Path) -> None:
    rt = read_trace(write(tmp_path / "t.json", trace([mem(1, 10, device_type="cuda")])))
    assert rt.memory.schema["device_type"] == pl.Utf8 and rt.memory["device_type"].to_list() == ["cuda"]


# --------------------------------------------------------------------------- rank


def test_rank_sources(tmp_path: Path) -> None:
    doc = trace([x("a", 1, 1)])
    by_name = read_trace(write(tmp_path / "job_rank12.json", doc))
    assert (by_name.rank, by_name.rank_source) == (12, "filename")
    assert by_name.warnings == ["no distributedInfo.rank; rank taken from file name (rank 12)"]
    hinted = read_trace(tmp_path / "job_rank12.json", rank_hint=5)
    assert (hinted.rank, hinted.rank_source) == (5, "hint")
    default = read_trace(write(tmp_path / "trace.json", doc))
    assert (default.rank, default.rank_source) == (0, "default")
    info = read_trace(write(tmp_path / "rank9.json", trace([x("a", 1, 1)], rank=2, world_size=4)))
    assert (info.rank, info.rank_source) == (2, "distributedInfo")
    assert info.warnings == ["file name says rank 9 but distributedInfo says rank 2; using 2"]


def test_gzip_detected_by_magic_not_name(tmp_path: Path) -> None:
    doc = simple_rank(1)
    plain_named_gz = write(tmp_path / "a.json.gz", doc, gz=False)
    gz_named_json = write(tmp_path / "b.json", doc, gz=True)
    assert read_trace(plain_named_gz).events.equals(read_trace(gz_named_json).events)
    before = gz_named_json.read_bytes()
    read_trace(gz_named_json)
    assert gz_named_json.read_bytes() == before  # never modified


# --------------------------------------------------------------------------- errors


def _err(path: Path) -> str:
    with pytest.raises(TraceError) as info:
        read_trace(path)
    msg = str(info.value)
    assert msg.startswith(str(path) + ": ")
    assert "\n" not in msg
    return msg[len(str(path)) + 2:]


GOOD = json.dumps(simple_rank(0))


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"", "empty file"),
        (b"  \n", "empty file (only whitespace)"),
        (b"hello", "not JSON (invalid character (byte 0); the file starts with 'hello')"),
        (GOOD[: GOOD.index('"aten::mm"') + 5].encode(), "truncated JSON (the file ends in the middle of the document)"),
        (GOOD.encode() + b"}", "invalid JSON: trailing characters"),
        (b"[1, 2]", "not a trace: the JSON is a list, expected an object with traceEvents"),
        (b"42", "not a trace: the JSON is a number, expected an object with traceEvents"),
        (b'{"schemaVersion": 1}', "not a trace: the JSON object has no traceEvents"),
        (b'{"traceEvents": {"a": 1}}', "not a trace: traceEvents is an object, expected a list of events"),
        (b'{"traceEvents": [1]}', "wrong type in traceEvents[0]: expected `object`, got `int`"),
        (b'{"traceEvents": [{"ph": "X", "name": 5, "ts": 1}]}', "wrong type in traceEvents[0].name: expected `str`, got `int`"),
        (b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "args": [1]}]}',
         "wrong type in traceEvents[0].args: expected `object | null`, got `array`"),
        (b'{"traceEvents": [{"ph": "X", "name": "a", "ts": "12"}]}',
         "traceEvents[0] ('a'): ts is a string (\"12\"), expected a number of µs"),
        (b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1}, {"ph": "X", "name": "b", "ts": 2, "dur": null}]}',
         "traceEvents[1] ('b'): dur is null (null), expected a number of µs"),
        (b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1e300}]}',
         "traceEvents[0] ('a'): ts is out of range (1e300), expected a number of µs"),
        (b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "pid": {\n"a":\n1}}, {"ph": "X", "name": "b", "ts": [\n]}]}',
         "traceEvents[1] ('b'): ts is not a number ([ ]), expected a number of µs"),
        (b'{"traceEvents": [{"ph": "i", "name": "[memory]", "ts": {}}]}',
         "traceEvents[0] ('[memory]'): ts is not a number ({}), expected a number of µs"),
        (b'{"distributedInfo": [0], "traceEvents": []}', "distributedInfo is [0] (list), expected an object"),
        (b'{"distributedInfo": {"rank": "0"}, "traceEvents": []}',
         "distributedInfo.rank is '0' (str), expected an integer >= 0"),
        (b'{"distributedInfo": {"rank": 4, "world_size": 4}, "traceEvents": []}',
         "distributedInfo.rank 4 is not below its world_size 4"),
        (b'{"baseTimeNanoseconds": -1, "traceEvents": []}', "baseTimeNanoseconds is -1 (int), expected an integer >= 0"),
    ],
)
def test_bad_files(tmp_path: Path, content: bytes, problem: str) -> None:
    p = tmp_path / "bad.json"
    p.write_bytes(content)
    assert _err(p).startswith(problem)


def test_gzip_errors(tmp_path: Path) -> None:
    data = gzip.compress(GOOD.encode())
    truncated = tmp_path / "trunc.json.gz"
    truncated.write_bytes(data[: len(data) // 2])
    assert _err(truncated) == "truncated gzip file (the compressed stream ends early)"
    corrupt = tmp_path / "corrupt.json.gz"
    corrupt.write_bytes(data[:12] + bytes(b ^ 0x5A for b in data[12:40]) + data[40:])
    assert _err(corrupt).startswith("corrupt gzip data (")
    empty = tmp_path / "empty.json.gz"
    empty.write_bytes(gzip.compress(b""))
    assert _err(empty) == "empty file (the gzip stream holds no data)"
    two = tmp_path / "two.json.gz"  # concatenated members are one stream
    two.write_bytes(gzip.compress(GOOD[:50].encode()) + gzip.compress(GOOD[50:].encode()))
    assert read_trace(two).events.height == 3


def test_missing_file_and_directory(tmp_path: Path) -> None:
    assert _err(tmp_path / "nope.json") == "no such file or directory"
    assert _err(tmp_path) == "is a directory, expected a trace file"
