"""`pipeaudit export --perfetto`: the Chrome trace is read back and checked against the run.

Checks mirror what ui.perfetto.dev needs to show the file: named processes and threads, slices
on a track that never overlap (Perfetto drops a slice that overlaps its neighbour without
nesting), flow ends that sit inside a slice of their track, non-negative timestamps, only
documented event fields.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter, defaultdict
from decimal import Decimal
from pathlib import Path

import polars as pl
import pytest

import pipeaudit
from tests.support.builders import BASE_NS, build_run, one_f_one_b_orders
from pipeaudit.report.perfetto import DOCUMENTED_FIELDS, write_perfetto
from tests.support.paths import SAMPLES
from tests.support.cli import invoke

IMB = SAMPLES / "1f1b_p4_m8_imb_s1x3"
MEMORY = SAMPLES / "1f1b_p2_m4_memory"
ZBV = SAMPLES / "zbv_p4_m8"


def read_trace(path: Path) -> dict:
    raw = path.read_bytes()
    if path.suffix == ".gz":
        assert raw[:2] == b"\x1f\x8b", "a .gz output must be gzip"
        raw = gzip.decompress(raw)
    return json.loads(raw)


def ns(us: float) -> int:
    """How a viewer turns a µs float into ns."""
    return int(round(us * 1000))


@pytest.fixture(scope="module")
def imb_run():
    return pipeaudit.load(IMB)


@pytest.fixture(scope="module")
def imb_trace(imb_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "imb.json"
    summary = write_perfetto(imb_run.timeline, str(out), with_ideal=True)
    return imb_run, read_trace(out), summary


def names(events, kind):
    return {(e["pid"], e.get("tid")): e["args"]["name"] for e in events
            if e["ph"] == "M" and e["name"] == kind}


def check_viewable(events):
    """Perfetto's constraints on our events: fields, ts >= 0, slices on a track either apart or
    one nested in the other (an action's ``waiting`` slices)."""
    for e in events:
        assert set(e) <= DOCUMENTED_FIELDS, set(e) - DOCUMENTED_FIELDS
        if "ts" in e:
            assert e["ts"] >= 0, e
    tracks = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            tracks[(e["pid"], e["tid"])].append((ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]), e["name"]))
    for key, rows in tracks.items():
        rows.sort(key=lambda r: (r[0], -r[1]))
        open_: list[tuple[int, int, str]] = []
        for s1, e1, n1 in rows:
            while open_ and open_[-1][1] <= s1:
                open_.pop()
            if open_:
                assert e1 <= open_[-1][1] and n1 == "waiting", f"{key}: {open_[-1][2]} overlaps {n1}"
            open_.append((s1, e1, n1))
    return tracks


def enclosing(tracks, pid, tid, ts_us):
    """The action slices around ``ts_us`` (an action's nested ``waiting`` slices left out)."""
    t = ns(ts_us)
    return [r for r in tracks[(pid, tid)] if r[0] < t < r[1] and r[2] != "waiting"]


def test_tracks_slices_flows_counters(imb_trace):
    run, doc, summary = imb_trace
    ev = doc["traceEvents"]
    result = run.audit()
    tracks = check_viewable(ev)
    acts = run.actions()

    # one process per rank, one named thread per stage, a bubble and an ideal track
    procs = names(ev, "process_name")
    assert {pid: n for (pid, _), n in procs.items()} == {r: f"rank {r}" for r in range(4)}
    threads = names(ev, "thread_name")
    for s, r in run.timeline.placement.items():
        assert threads[(r, 1)] == f"stage {s}"
        assert threads[(r, 1001)] == f"stage {s} · replay ideal"
        assert threads[(r, 2001)] == "bubble"
    assert any(e["name"] == "process_sort_index" for e in ev)
    assert any(e["name"] == "thread_sort_index" for e in ev)

    # slices per stage = actions per stage; names carry kind, microbatch and stage
    measured = [e for e in ev if e["ph"] == "X" and e["cat"] in "FBIW"]
    per_stage = Counter(e["args"]["stage"] for e in measured)
    want = dict(acts.group_by("stage").len().iter_rows())
    assert per_stage == want
    f3 = next(e for e in measured if e["args"]["action"] == "1F3" and e["args"]["step"] == 0)
    assert f3["name"] == "F3 (stage 1)" and f3["cname"] == "rail_response"
    row = acts.filter((pl.col("stage") == 1) & (pl.col("kind") == "F") & (pl.col("microbatch") == 3)
                      & (pl.col("step") == 0)).row(0, named=True)
    assert f3["args"]["compute_us"] == pytest.approx(row["compute_ns"] / 1000, abs=1e-3)
    assert f3["args"]["span_us"] == pytest.approx((row["end"] - row["start"]) / 1000, abs=1e-3)
    assert {e["cname"] for e in measured if e["cat"] == "B"} == {"rail_load"}

    # flows pair up: one s and one f per id, same name and cat, bound inside slices on two ranks
    starts = {e["id"]: e for e in ev if e["ph"] == "s"}
    finishes = {e["id"]: e for e in ev if e["ph"] == "f"}
    assert len(starts) == sum(e["ph"] == "s" for e in ev)
    assert starts.keys() == finishes.keys() and starts
    for i, s in starts.items():
        f = finishes[i]
        assert f["bp"] == "e" and f["name"] == s["name"] and f["cat"] == s["cat"]
        assert s["pid"] != f["pid"]
        assert len(enclosing(tracks, s["pid"], s["tid"], s["ts"])) == 1
        assert len(enclosing(tracks, f["pid"], f["tid"], f["ts"])) == 1
    # 1F1B on 4 ranks: F crosses 3 stage boundaries and B 3, for each of 8 microbatches x 2 steps
    assert len(starts) == summary.flows == 2 * 8 * 2 * 3

    # counters: in-flight per stage peaks at the audit's per-stage peak
    inflight = defaultdict(int)
    for e in ev:
        if e["ph"] == "C" and e["name"] == "in-flight microbatches":
            (key, value), = e["args"].items()
            inflight[int(key.split()[1])] = max(inflight[int(key.split()[1])], value)
    assert inflight == {s.stage: s.peak_inflight for s in result.stages}


def test_bubble_track_adds_up_to_the_audited_bubble(imb_trace):
    run, doc, _ = imb_trace
    result = run.audit()
    got = defaultdict(lambda: defaultdict(float))
    windows = {}
    for e in doc["traceEvents"]:
        if e["ph"] == "X" and e["cat"] == "bubble":
            got[e["pid"]][e["args"]["step"]] += e["args"]["dur_us"]
            windows[e["args"]["step"]] = e["args"]["step_window_us"]
    for r in result.ranks:
        for k, b in enumerate(r.bubble_by_step):
            assert got[r.rank][k] / windows[k] == pytest.approx(b, abs=1e-6)


def test_ideal_track_is_the_replay_ideal(imb_trace):
    run, doc, summary = imb_trace
    result = run.audit()
    ideal = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] == "ideal"]
    assert len(ideal) == summary.ideal_slices == run.actions().height
    for st in result.steps:
        rows = [e for e in ideal if e["args"]["step"] == st.step]
        start = min(e["ts"] for e in rows)
        end = max(e["ts"] + e["dur"] for e in rows)
        assert end - start == pytest.approx(st.replay_step_time_us, abs=0.01)
        # aligned at the step window's start
        measured = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] in "FBIW"
                    and e["args"]["step"] == st.step]
        first_compute = min(e["args"]["compute_start_us"] for e in measured)
        assert start == pytest.approx(first_compute, abs=0.01)


def test_memory_counters_and_gz(tmp_path):
    run = pipeaudit.load(MEMORY)
    out = tmp_path / "mem.json.gz"
    write_perfetto(run.timeline, str(out))
    doc = read_trace(out)
    check_viewable(doc["traceEvents"])
    mem = [e for e in doc["traceEvents"] if e["ph"] == "C" and e["name"].startswith("memory")]
    assert len(mem) == sum(rt.memory.height for rt in run.timeline.ranks)
    for r in run.audit().ranks:
        peak = max(e["args"]["Total Allocated"] for e in mem if e["pid"] == r.rank)
        assert peak == r.peak_allocated_bytes


def test_two_stages_per_rank_get_two_tracks(tmp_path):
    run = pipeaudit.load(ZBV)
    out = tmp_path / "zbv.json"
    write_perfetto(run.timeline, str(out))
    ev = read_trace(out)["traceEvents"]
    check_viewable(ev)
    threads = names(ev, "thread_name")
    assert threads[(0, 1)] == "stage 0" and threads[(0, 2)] == "stage 7"
    kinds = {e["cat"] for e in ev if e["ph"] == "X"}
    assert {"F", "I", "W", "bubble"} <= kinds
    # the V: stage 3 -> 4 stays on rank 3, so no arrow joins them
    assert not [e for e in ev if e["ph"] == "s" and "stage 3 -> 4" in e["name"]]


def _same_pid_run(tmp_path):
    """A built 1F1B run whose ranks all use process 7 and the same Kineto flow ids."""
    built = build_run(tmp_path, one_f_one_b_orders(3, 4), steps=2, latency=50)
    for path in built.files:
        doc = json.loads(path.read_text())
        for e in doc["traceEvents"]:
            e["pid"] = 7
        doc["traceEvents"] += [
            {"ph": "M", "name": "process_name", "pid": 7, "tid": 0, "args": {"name": "python"}},
            {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 1, "pid": 7, "tid": 107, "ts": 1500},
            {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 1, "pid": 7, "tid": 107, "ts": 1600, "bp": "e"},
        ]
        path.write_text(json.dumps(doc))
    return built


def test_merge_original(tmp_path):
    built = _same_pid_run(tmp_path)
    before = {p: p.read_bytes() for p in built.files}
    run = pipeaudit.load(built.directory)
    out = tmp_path / "merged.json.gz"
    summary = write_perfetto(run.timeline, str(out), merge_original=True, with_ideal=True)
    doc = read_trace(out)
    ev = doc["traceEvents"]
    assert {p: p.read_bytes() for p in built.files} == before, "inputs are never modified"

    originals = [json.loads(p.read_text())["traceEvents"] for p in built.files]
    assert summary.original_events == sum(len(o) for o in originals)
    procs = {pid: n for (pid, _), n in names(ev, "process_name").items()}
    for r in range(3):
        assert procs[r] == f"rank {r} · pipeline"
    # every rank's process 7 became its own pid, named after its rank
    rank_of_pid = {pid: int(n.split()[1]) for pid, n in procs.items()}
    merged_7 = sorted(pid for pid, n in procs.items() if n.endswith("· python"))
    assert len(merged_7) == 3 and {rank_of_pid[p] for p in merged_7} == {0, 1, 2}
    # pipeline tracks keep their own checks
    ours = [e for e in ev if e["pid"] in range(3)]
    check_viewable(ours)
    # timestamps re-based exactly: same events, shifted by the origin
    origin = doc["otherData"]["origin_ns"]
    mm = sorted(ns(e["ts"]) + origin for e in ev if e.get("name") == "aten::mm")
    want = sorted(BASE_NS + int(Decimal(str(e["ts"])) * 1000) for o in originals for e in o
                  if e.get("name") == "aten::mm")
    assert mm == want
    assert min(e["ts"] for e in ev if "ts" in e) >= 0
    # the three ranks' Kineto flow 1 no longer join each other
    kineto = [e for e in ev if e.get("cat") == "ac2g"]
    by_id = defaultdict(list)
    for e in kineto:
        by_id[e["id"]].append(e)
    assert len(by_id) == 3
    for pair in by_id.values():
        assert sorted(e["ph"] for e in pair) == ["f", "s"]
        assert len({rank_of_pid[e["pid"]] for e in pair}) == 1


def test_merge_original_real_sample(tmp_path):
    run = pipeaudit.load(IMB)
    out = tmp_path / "merged.json"
    summary = write_perfetto(run.timeline, str(out), merge_original=True)
    doc = read_trace(out)
    ev = doc["traceEvents"]
    procs = {pid: n for (pid, _), n in names(ev, "process_name").items()}
    assert all(n.startswith("rank ") for n in procs.values())
    pids = {e["pid"] for e in ev}
    assert pids <= set(procs), "every pid used is named"
    # torch's own events use documented fields too, so the whole file does
    assert set().union(*ev) <= DOCUMENTED_FIELDS
    assert min(e["ts"] for e in ev if "ts" in e) >= 0
    kept = 0
    for p in sorted(IMB.glob("rank*.json.gz")):
        kept += sum(1 for e in json.loads(gzip.decompress(p.read_bytes()))["traceEvents"]
                    if e.get("name") != "process_sort_index")  # replaced by the merge's own
    assert summary.original_events == kept
    assert sum(1 for e in ev if e["pid"] >= 4 and e.get("cat") != "pipeaudit") >= kept
    # Kineto's own flows (fwdbwd, ac2g) still pair up, each within one rank
    rank_of_pid = {pid: int(n.split()[1]) for pid, n in procs.items()}
    ends = defaultdict(list)
    for e in ev:
        if e["ph"] in ("s", "f") and e["pid"] >= 4:
            ends[(e["cat"], e["id"])].append(e)
    assert ends
    for pair in ends.values():
        assert sorted(e["ph"] for e in pair) == ["f", "s"]
        assert len({rank_of_pid[e["pid"]] for e in pair}) == 1


def test_cli_export_and_refusals(tmp_path):
    out = tmp_path / "run.json.gz"
    res = invoke("export", str(IMB), "--perfetto", str(out), "--with-ideal")
    assert res.exit_code == 0, res.output
    assert "open it in ui.perfetto.dev" in res.output
    assert read_trace(out)["traceEvents"]
    res = invoke("export", str(IMB), "--perfetto", str(out))  # overwritten, as cp does
    assert res.exit_code == 0, res.output
    res = invoke("export", str(IMB), "--perfetto", str(out), "--force", "--merge-original")
    assert res.exit_code == 0, res.output  # --force is still accepted
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    res = invoke("export", str(bad), "--perfetto", str(tmp_path / "x.json"))
    assert res.exit_code == 2 and str(bad) in res.output and "Traceback" not in res.output
    assert not (tmp_path / "x.json").exists()
    res = invoke("export", str(IMB), "--perfetto", str(tmp_path / "no" / "x.json"))
    assert res.exit_code == 2 and "cannot write" in res.output


def test_waiting_inside_an_action_is_its_own_nested_slice(tmp_path):
    """An un-annotated DeepSpeed run: its actions' spans hold waits; each is a ``waiting``
    slice nested in its action, and the action's compute plus its waits (>= 20 us and 5% of
    the span) is most of its span."""
    run = pipeaudit.load(SAMPLES / "deepspeed_p4_m8")
    out = tmp_path / "ds.json"
    summary = write_perfetto(run.timeline, str(out))
    ev = json.loads(out.read_text())["traceEvents"]
    check_viewable(ev)
    waits = [e for e in ev if e["ph"] == "X" and e["name"] == "waiting"]
    assert summary.wait_slices == len(waits) > 0 and {e["cname"] for e in waits} == {"grey"}
    acts = {(e["pid"], e["args"]["action"], e["args"]["step"]): e
            for e in ev if e["ph"] == "X" and e["cat"] in "FBIW"}
    waited = Counter()
    for w in waits:
        a = acts[(w["pid"], w["args"]["action"], w["args"]["step"])]
        assert a["ts"] <= w["ts"] and w["ts"] + w["dur"] <= a["ts"] + a["dur"] + 1e-3
        waited[(w["pid"], w["args"]["action"], w["args"]["step"])] += w["dur"]
    # compute + waiting covers the span, up to the short host gaps between ops
    for key, wait_us in waited.items():
        a = acts[key]["args"]
        assert wait_us + a["compute_us"] <= a["span_us"] + 0.01
        assert wait_us + a["compute_us"] >= 0.8 * a["span_us"]
