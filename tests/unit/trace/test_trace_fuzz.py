"""Property: whatever JSON-ish trace a file holds, read_trace returns a RankTrace or raises
TraceError, never anything else; and well-formed traces keep every complete event exactly."""

from __future__ import annotations

import gzip
import os
from decimal import Decimal
from pathlib import Path

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeaudit.errors import TraceError
from pipeaudit.trace import EVENT_SCHEMA, read_trace

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8),
)
json_values = st.recursive(
    json_scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=4,
)
# ts / dur as Kineto writes them: integers or decimals with up to 3 places, big or small
us_numbers = st.one_of(
    st.integers(0, 2**51),
    st.decimals(min_value=0, max_value=2**51, places=3, allow_nan=False, allow_infinity=False),
)
ids = st.one_of(st.integers(0, 2**31), st.text(min_size=1, max_size=6))


@st.composite
def good_events(draw):
    kind = draw(st.sampled_from(["X", "X", "X", "i", "s", "f", "M"]))
    e = {"ph": kind, "name": draw(st.text(max_size=10)), "pid": draw(ids), "tid": draw(ids), "ts": draw(us_numbers)}
    if kind == "X":
        if draw(st.booleans()):
            e["cat"] = draw(st.sampled_from(["cpu_op", "kernel", "cuda_runtime", "python_function", "user_annotation"]))
        if draw(st.booleans()):
            e["dur"] = draw(us_numbers)
        e["args"] = draw(st.fixed_dictionaries({}, optional={
            "External id": st.integers(0, 2**40), "correlation": st.integers(0, 2**40),
            "stream": st.integers(0, 64), "device": st.integers(0, 8), "Input Dims": json_values}))
    if kind == "i" and draw(st.booleans()):
        e["name"] = "[memory]"
        e["args"] = {"Total Allocated": draw(st.integers(0, 2**40)), "Device Id": draw(st.integers(-1, 8)),
                     "Device Type": draw(st.integers(0, 1))}
    return e


@st.composite
def good_traces(draw):
    doc = {"schemaVersion": 1, "traceEvents": draw(st.lists(good_events(), max_size=12))}
    if draw(st.booleans()):
        doc["distributedInfo"] = {"backend": "gloo", "rank": draw(st.integers(0, 3)), "world_size": 4}
    if draw(st.booleans()):
        doc["baseTimeNanoseconds"] = draw(st.integers(0, 2**61))
    return doc


@st.composite
def mutated_traces(draw):
    doc = draw(good_traces())
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(["top", "event", "args", "header", "replace"]))
        if where == "replace":
            return draw(json_values)
        if where == "top":
            doc[draw(st.sampled_from(["traceEvents", "distributedInfo", "baseTimeNanoseconds", "deviceProperties"]))] = draw(json_values)
        elif where == "header":
            doc["distributedInfo"] = {draw(st.sampled_from(["rank", "world_size", "backend"])): draw(json_values)}
        elif isinstance(doc.get("traceEvents"), list) and doc["traceEvents"]:
            ev = doc["traceEvents"][draw(st.integers(0, len(doc["traceEvents"]) - 1))]
            if not isinstance(ev, dict):
                continue
            if where == "event":
                ev[draw(st.sampled_from(["ph", "name", "cat", "ts", "dur", "pid", "tid", "args"]))] = draw(json_values)
            else:
                ev["args"] = {draw(st.sampled_from(["External id", "correlation", "stream", "device",
                                                     "Total Allocated", "Device Id", "Device Type"])): draw(json_values)}
    return doc


_ENCODE = msgspec.json.Encoder(decimal_format="number").encode  # Decimal -> a JSON number


def _write(folder: Path, doc, gz: bool, cut: int | None = None, pretty: bool = False) -> Path:
    data = _ENCODE(doc)
    if pretty:  # newlines inside values, as Kineto's own indented output has
        data = msgspec.json.format(data, indent=1)
    if cut is not None:
        data = data[:cut]
    if gz:
        data = gzip.compress(data)
    p = folder / ("t.json.gz" if gz else "t.json")
    p.write_bytes(data)
    return p


# PIPEAUDIT_FUZZ_EXAMPLES=2000 for a longer search (the default keeps the suite fast)
SETTINGS = settings(max_examples=int(os.environ.get("PIPEAUDIT_FUZZ_EXAMPLES", "60")), deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(doc=mutated_traces(), gz=st.booleans(), cut=st.none() | st.integers(0, 400), pretty=st.booleans())
def test_only_trace_errors(scratch, doc, gz: bool, cut: int | None, pretty: bool) -> None:
    path = _write(scratch, doc, gz, cut, pretty)
    try:
        rt = read_trace(path)
    except TraceError as exc:
        assert str(exc).startswith(str(path) + ": ") and "\n" not in str(exc)
        return
    assert dict(rt.events.schema) == EVENT_SCHEMA


@SETTINGS
@given(doc=good_traces())
def test_good_traces_keep_every_complete_event_exactly(scratch, doc) -> None:
    path = _write(scratch, doc, gz=False)
    rt = read_trace(path)
    base = doc.get("baseTimeNanoseconds", 0)
    want = sorted(
        (base + int(Decimal(str(e["ts"])) * 1000), int(Decimal(str(e.get("dur", 0))) * 1000))
        for e in doc["traceEvents"] if e["ph"] == "X" and e.get("cat") != "python_function" and "dur" in e
    )  # a complete event without dur has no end: dropped and counted
    assert sorted(zip(rt.events["ts"].to_list(), rt.events["dur"].to_list())) == want
    assert rt.memory.height == sum(1 for e in doc["traceEvents"] if e["ph"] == "i" and e["name"] == "[memory]")
