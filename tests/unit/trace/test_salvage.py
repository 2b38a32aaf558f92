"""--salvage: complete events before the damage, steps the damage cut excluded, losses named.

Real harness traces (sample_traces/) are cut the way a killed job cuts them: the gzip stream
or the JSON text ends early. The audit of the salvaged run must agree exactly with the audit
of the intact run on every step that survived, and must not audit a cut step at all.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

import pipeaudit
from pipeaudit.errors import TraceError
from pipeaudit.trace import load_traces, read_trace
from pipeaudit.errors import TraceErrorKind
from pipeaudit.trace.jsonscan import rebuild, scan
from pipeaudit.trace.salvage import is_salvageable
from pipeaudit.trace.source import read_text
from tests.support.synth import trace, x
from tests.support.paths import SAMPLES
from tests.support.cli import invoke

SAMPLE = SAMPLES / "1f1b_p4_m8"
T0 = 1_700_000_000_000_000


def _copy(tmp_path: Path, src: Path = SAMPLE) -> Path:
    d = tmp_path / src.name
    shutil.copytree(src, d)
    return d


def _cut_gzip(path: Path, frac: float) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * frac)])


def _cut_json(path: Path, frac: float) -> Path:
    """Replace rank*.json.gz by the first ``frac`` of its JSON text, as rank*.json."""
    raw = gzip.decompress(path.read_bytes())
    out = path.with_name(path.name[: -len(".gz")])
    out.write_bytes(raw[: int(len(raw) * frac)])
    path.unlink()
    return out


@pytest.fixture(scope="module")
def intact():
    return pipeaudit.load(SAMPLE).audit()


def _steps(res) -> list[tuple]:
    return [(s.profiler_step, s.start_us, s.step_time_us, s.bubble, s.replay_ideal) for s in res.steps]


# --------------------------------------------------------------------------- real traces


@pytest.mark.parametrize("how", ["gzip", "json"])
@pytest.mark.parametrize("frac", [0.6, 0.85, 0.97])
def test_cut_rank_keeps_complete_steps_exactly(tmp_path, intact, how, frac):
    d = _copy(tmp_path)
    if how == "gzip":
        _cut_gzip(d / "rank2.json.gz", frac)
    else:
        _cut_json(d / "rank2.json.gz", frac)
    res = pipeaudit.load(d, salvage=True).audit()
    # ProfilerStep#1 was cut on rank 2: it is audited on no rank; step 0 is exactly as before
    assert [s.profiler_step for s in res.steps] == [0]
    assert _steps(res) == _steps(intact)[:1]
    assert [r.bubble for r in res.ranks] == [r.bubble_by_step[0] for r in intact.ranks]
    finding = next(f for f in res.findings if f.code == "TRUNCATED_TRACE")
    assert finding.rank == 2 and finding.severity == "warning"
    assert "steps after ProfilerStep#0 are incomplete and excluded (ProfilerStep#1)" in finding.message
    (rep,) = res.salvage
    assert rep["rank"] == 2 and rep["excluded_steps"] == [1] and rep["last_complete_step"] == 0
    assert 0 < rep["events_recovered"] < 2853 and rep["end_ns"] > rep["start_ns"]
    assert rep["bytes_read"] <= rep["size_bytes"] and rep["json_bytes"] > 0
    assert any("excluded on every rank: the trace of rank 2 (" in n and "is damaged" in n for n in res.notes)


def test_damage_only_in_the_trailer_keeps_every_step(tmp_path, intact):
    d = _copy(tmp_path)
    raw = gzip.decompress((d / "rank1.json.gz").read_bytes())
    (d / "rank1.json.gz").write_bytes(gzip.compress(raw[:-20]))  # '],"traceName": "/tmp/...' cut
    res = pipeaudit.load(d, salvage=True).audit()
    assert _steps(res) == _steps(intact)
    (rep,) = res.salvage
    assert rep["events_recovered"] == 2853 and rep["excluded_steps"] == []
    assert "every recovered step is complete" in rep["message"]


def test_cut_inside_the_first_step_is_an_error(tmp_path):
    d = _copy(tmp_path)
    _cut_json(d / "rank0.json.gz", 0.2)
    with pytest.raises(TraceError, match=r"rank0\.json: truncated JSON .*no complete step: the trace "
                                         r"ends inside ProfilerStep#0"):
        pipeaudit.load(d, salvage=True)


def test_cut_before_any_event_is_an_error(tmp_path):
    d = _copy(tmp_path)
    _cut_json(d / "rank3.json.gz", 0.0003)  # inside the header
    with pytest.raises(TraceError, match=r"rank3\.json: truncated JSON .*found nothing to recover"):
        pipeaudit.load(d, salvage=True)


def test_without_salvage_the_cli_refuses_and_mentions_salvage(tmp_path):
    d = _copy(tmp_path)
    _cut_gzip(d / "rank1.json.gz", 0.8)
    res = invoke("analyze", str(d))
    assert res.exit_code == 2
    assert res.stderr == (f"pipeaudit: error: {d / 'rank1.json.gz'}: truncated gzip file (the compressed "
                          "stream ends early); pass --salvage to analyse the complete events before the "
                          "damage\n")
    ok = invoke("analyze", str(d), "--salvage", "--format", "json")
    assert ok.exit_code == 0 and ok.stderr == ""
    doc = json.loads(ok.stdout)
    assert doc["num_steps"] == 1 and doc["salvage"][0]["rank"] == 1
    assert "TRUNCATED_TRACE" in [f["code"] for f in doc["findings"]]
    text = invoke("analyze", str(d), "--salvage")
    assert "TRUNCATED_TRACE" in text.stdout  # about the input: shown in the one-screen report
    text = invoke("analyze", str(d), "--salvage", "--verbose")
    assert "TRUNCATED_TRACE" in text.stdout and "steps after ProfilerStep#0" in text.stdout


def test_intact_files_are_untouched_by_salvage(intact):
    res = pipeaudit.load(SAMPLE, salvage=True).audit()
    assert res.salvage == [] and _steps(res) == _steps(intact)
    assert "TRUNCATED_TRACE" not in [f.code for f in res.findings]


def test_parallel_decode_carries_the_report(tmp_path):
    d = _copy(tmp_path)
    _cut_gzip(d / "rank3.json.gz", 0.8)
    seq = load_traces([d], salvage=True, jobs=1)
    par = load_traces([d], salvage=True, jobs=2)
    assert [r.salvage for r in seq] == [r.salvage for r in par]
    assert seq.salvaged[0].rank == 3 and seq.warnings == par.warnings


# --------------------------------------------------------------------------- built traces


def _doc_text(events: list[dict], **header) -> bytes:
    return json.dumps(trace(events, rank=0, world_size=1, **header), indent=1).encode()


def test_step_less_trace_drops_spans_cut_by_the_damage(tmp_path):
    evs = [x("PP:0F0", T0, 100, cat="user_annotation"), x("aten::mm", T0 + 10, 50),
           x("PP:0B0", T0 + 200, 100, cat="user_annotation"), x("aten::mm", T0 + 210, 20),
           x("aten::mm", T0 + 250, 20)]
    text = _doc_text(evs)
    cut = text.rindex(b'"aten::mm"') + 5  # inside the last aten::mm
    p = tmp_path / "rank0.json"
    p.write_bytes(text[:cut])
    rt = read_trace(p, salvage=True)
    # the last mm was not recovered; the trace ends where the second mm starts: PP:0B0 and
    # that mm end later, so they may have lost children after the cut and are dropped too
    assert rt.events["name"].to_list() == ["PP:0F0", "aten::mm"]
    assert rt.salvage.events_cut == 2 and rt.salvage.steps_found == []
    assert rt.salvage.end_ns == (T0 + 210) * 1000
    assert "no ProfilerStep spans" in rt.warnings[-1]
    res = pipeaudit.load(p, salvage=True).audit()
    codes = [f.code for f in res.findings]
    assert "TRUNCATED_TRACE" in codes and "MISSING_ACTIONS" in codes  # 0B0 is gone: flagged


def test_gpu_step_with_lost_kernels_is_excluded(tmp_path):
    """Kernels run after their launches: a step whose launches lost their kernels is cut."""
    evs = [x("ProfilerStep#0", T0, 100, cat="user_annotation"),
           x("cudaLaunchKernel", T0 + 10, 5, cat="cuda_runtime", correlation=1),
           x("ProfilerStep#1", T0 + 100, 100, cat="user_annotation"),
           x("cudaLaunchKernel", T0 + 110, 5, cat="cuda_runtime", correlation=2),
           x("gemm", T0 + 20, 30, cat="kernel", correlation=1, stream=7, device=0),
           x("cudaDeviceSynchronize", T0 + 205, 1, cat="cuda_runtime"),
           x("gemm", T0 + 150, 30, cat="kernel", correlation=2, stream=7, device=0)]
    text = _doc_text(evs)
    p = tmp_path / "rank0.json"
    p.write_bytes(text[: text.rindex(b'"gemm"')])  # the second kernel is lost
    rt = read_trace(p, salvage=True)
    assert rt.salvage.steps_found == [0, 1] and rt.salvage.excluded_steps == [1]
    assert rt.salvage.last_complete_step == 0


def test_trailing_garbage_and_zero_fill(tmp_path):
    evs = [x("ProfilerStep#0", T0, 50, cat="user_annotation"), x("aten::mm", T0 + 10, 5),
           x("ProfilerStep#1", T0 + 60, 40, cat="user_annotation"), x("aten::mm", T0 + 70, 5)]
    text = _doc_text(evs)
    garbage = tmp_path / "garbage.json"
    garbage.write_bytes(text + b"\n}}]garbage")
    with pytest.raises(TraceError, match="invalid JSON: trailing characters"):
        read_trace(garbage)
    rt = read_trace(garbage, salvage=True)  # every event came before the damage: all kept
    assert rt.events.height == 4 and rt.salvage.excluded_steps == [] and rt.salvage.all_events
    zeros = tmp_path / "zeros.json"
    zeros.write_bytes(text[: text.rindex(b"aten::mm") - 20] + b"\0" * 4096)
    with pytest.raises(TraceError, match=r"the last 4,096 bytes .* are zeros: the file was cut short"):
        read_trace(zeros)
    rt = read_trace(zeros, salvage=True)
    assert rt.events["name"].to_list() == ["ProfilerStep#0", "aten::mm"]
    assert rt.salvage.excluded_steps == [1]


def test_garbage_in_the_middle_stops_the_salvage(tmp_path):
    evs = [x("ProfilerStep#0", T0, 15, cat="user_annotation"), x("a", T0 + 5, 5),
           x("ProfilerStep#1", T0 + 16, 100, cat="user_annotation"), x("b", T0 + 20, 5),
           x("c", T0 + 30, 5), x("d", T0 + 40, 5)]
    text = _doc_text(evs)
    at = text.index(b'"c"')
    p = tmp_path / "rank0.json"
    p.write_bytes(text[:at] + b"\x07\x07" + text[at + 2:])  # a broken event in the middle
    rt = read_trace(p, salvage=True)
    # nothing after the damage (not even the intact "d"); step 1 is cut by it
    assert rt.salvage.events_recovered == 4 and rt.salvage.excluded_steps == [1]
    assert rt.events["name"].to_list() == ["ProfilerStep#0", "a"]


def test_corrupt_gzip_is_not_salvaged(tmp_path):
    data = gzip.compress(_doc_text([x("a", T0, 5)] * 200), mtime=0)
    p = tmp_path / "rank0.json.gz"
    p.write_bytes(data[:40] + bytes(b ^ 0xFF for b in data[40:60]) + data[60:])
    with pytest.raises(TraceError, match=r"corrupt gzip data .*nothing is salvaged"):
        read_trace(p, salvage=True)


def _kind(path: Path) -> TraceErrorKind:
    with pytest.raises(TraceError) as info:
        read_trace(path)
    return info.value.kind


def test_salvage_is_routed_by_the_error_kind(tmp_path):
    """Which damage --salvage takes on is decided by the error's kind, never by its words."""
    text = _doc_text([x(f"e{i}", T0 + i, 1) for i in range(300)])
    data = gzip.compress(text, mtime=0)
    cases = {"corrupt.json.gz": (data[:40] + bytes(b ^ 0xFF for b in data[40:60]) + data[60:],
                                 TraceErrorKind.GZIP_CORRUPT, False),
             "garbage.json.gz": (data + b"junk", TraceErrorKind.GZIP_TRAILING_GARBAGE, True),
             "cut.json.gz": (data[:len(data) // 2], TraceErrorKind.GZIP_TRUNCATED, True),
             "cut.json": (text[:len(text) // 2], TraceErrorKind.JSON_TRUNCATED, True),
             "trailing.json": (text + b" x", TraceErrorKind.JSON_INVALID, True),
             "empty.json": (b"", TraceErrorKind.EMPTY, False),
             "list.json": (b"[1]", TraceErrorKind.NOT_A_TRACE, False)}
    for name, (content, kind, salvageable) in cases.items():
        p = tmp_path / name
        p.write_bytes(content)
        with pytest.raises(TraceError) as info:
            read_trace(p)
        assert info.value.kind is kind, name
        assert is_salvageable(info.value) == info.value.salvageable == salvageable, name


def _tolerant(tmp_path: Path, data: bytes) -> tuple[bytes, int, str | None]:
    p = tmp_path / "t.json.gz"
    p.write_bytes(data)
    out, source = read_text(p, tolerant=True)
    return out, source.compressed_used, source.damage.problem if source.damage else None


def test_tolerant_gunzip_prefix_and_members(tmp_path):
    """The byte reader's tolerant mode: a cut gzip stream gives a prefix of the text."""
    text = _doc_text([x(f"e{i}", T0 + i, 1) for i in range(300)])
    data = gzip.compress(text, mtime=0)
    for cut in (10, len(data) // 3, len(data) - 9, len(data) - 1, len(data)):
        out, used, problem = _tolerant(tmp_path, data[:cut])
        assert text.startswith(out)
        assert (problem is None) == (cut == len(data)) and used <= cut
    two = gzip.compress(text[:100], mtime=0) + gzip.compress(text[100:], mtime=0)
    assert _tolerant(tmp_path, two) == (text, len(two), None)
    assert _tolerant(tmp_path, two + b"\0\0\0")[0] == text
    assert _tolerant(tmp_path, two + b"junk")[2] == "corrupt gzip data (garbage after the compressed stream)"


def test_scan_keeps_header_and_trailer():
    text = (b'{"schemaVersion": 1, "distributedInfo": {"rank": 3, "world_size": 4, "x": "}]"}, '
            b'"traceEvents": [{"ph": "X", "name": "a{\\"}", "ts": 1}, {"ph": "X", "name": "b", "ts": 2}], '
            b'"traceName": "t", "displayTimeUnit": "ms"}')
    for cut, n_events, trailer in [(len(text), 2, 2), (len(text) - 1, 2, 1), (text.index(b'"b"'), 1, 0)]:
        sc = scan(text[:cut])
        assert sc is not None and len(sc.events) == n_events and len(sc.trailer) == trailer
        doc = json.loads(rebuild(text[:cut], sc, len(sc.events), sc.trailer)[0])
        assert doc["distributedInfo"]["rank"] == 3 and len(doc["traceEvents"]) == n_events
    assert scan(b'{"schemaVersion": 1, "traceEv') is None
    assert scan(b"[1, 2]") is None and scan(b"") is None


def test_file_out_of_time_order_is_not_guessed(tmp_path):
    """Older traces group events by thread: what the cut lost cannot be told, so no step is kept."""
    main = [x("ProfilerStep#0", T0, 100, cat="user_annotation"), x("a", T0 + 10, 5),
            x("ProfilerStep#1", T0 + 100, 100, cat="user_annotation"), x("b", T0 + 110, 5)]
    other = [x("bwd", T0 + 20 + 40 * i, 5, tid=2) for i in range(5)]  # a second thread, written after
    text = _doc_text(main + other)
    p = tmp_path / "rank0.json"
    p.write_bytes(text[: text.rindex(b'"bwd"')])
    with pytest.raises(TraceError, match=r"no complete step: the trace ends inside ProfilerStep#0 \(0\.050 "
                                         r"ms after it starts\); its events are out of time order by up "
                                         r"to 0\.090 ms"):
        read_trace(p, salvage=True)
    sorted_text = _doc_text(sorted(main + other, key=lambda e: e["ts"]))
    p.write_bytes(sorted_text[: sorted_text.rindex(b'"bwd"')])  # same cut, time-ordered file
    rt = read_trace(p, salvage=True)
    assert rt.salvage.order_lag_ns == 0 and rt.salvage.last_complete_step == 0
