"""What the parent process holds of each rank until the audit, made small without changing
a figure: the compute intervals packed, the header values every rank repeats shared, and the
job's transfers settled a chunk of whole replicas at a time."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

import pipeaudit
from pipeaudit.timeline import p2p
from pipeaudit.timeline.packed import PackedIntervals, PackedSpans
from pipeaudit.timeline.rank import PACKED_SPANS
from pipeaudit.trace.header import SharedHeaderValues
from tests.support.builders import build_replicas, one_f_one_b_orders
from tests.support.timelines import timeline


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_packed_intervals_give_back_the_same_table(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 3000))
    start = rng.integers(-(1 << 62), 1 << 62, n)  # any int64, in any order
    table = pl.DataFrame({"action": rng.integers(0, 500, n), "start": start,
                          "end": start + rng.integers(0, 1 << 40, n)})
    packed = PackedIntervals.of(table)
    assert packed.frame().equals(table)
    assert packed.nbytes < table.estimated_size()
    moved = packed.shifted(-123_456).shifted(23_456).frame()
    assert moved.equals(table.with_columns(pl.col("start") - 100_000, pl.col("end") - 100_000))


@pytest.mark.parametrize("gap", [10_000, 5_000_000_000])  # a step's gap over 2**31 ns or not
def test_packed_intervals_of_a_trace_are_narrow_where_they_fit(gap):
    """Differences that fit in 32 bits are packed in 32 bits, column by column; intervals
    out of order (negative differences) and a clock far from zero change nothing."""
    rng = np.random.default_rng(7)
    n = 2000
    start = 1_795_473_546_126_695_865 + np.cumsum(rng.integers(0, 50_000, n))
    start[n // 2:] += gap
    rng.shuffle(start[:100])
    table = pl.DataFrame({"action": np.repeat(np.arange(100), 20), "start": start,
                          "end": start + rng.integers(0, 3_000_000, n)})
    packed = PackedIntervals.of(table)
    assert packed.widths == ((4, 4, 4) if gap < 2**31 else (4, 8, 4))
    assert packed.frame().equals(table)
    assert packed.shifted(-5).frame().equals(table.with_columns(pl.col("start") - 5,
                                                                pl.col("end") - 5))


def test_packed_intervals_of_nothing():
    empty = pl.DataFrame(schema={"action": pl.Int64, "start": pl.Int64, "end": pl.Int64})
    assert PackedIntervals.of(empty).frame().equals(empty)


def test_a_rank_timeline_reads_and_writes_its_packed_fields_as_frames_and_arrays():
    rt = timeline(one_f_one_b_orders(2, 4)).ranks[0]
    before, comm = rt.compute, rt.comm
    assert isinstance(rt.compute_packed, PackedIntervals) and "compute" not in vars(rt)
    assert all(isinstance(getattr(rt, f"{n}_packed"), PackedSpans) and n not in vars(rt)
               for n in PACKED_SPANS)
    rt.shift_packed(1_000)
    assert rt.compute.equals(before.with_columns(pl.col("start") + 1_000, pl.col("end") + 1_000))
    assert all(np.array_equal(a + 1_000, b) for a, b in zip(comm, rt.comm))
    rt.compute = before.head(1)
    assert rt.compute.equals(before.head(1))
    rt.comm = (comm[0][:1], comm[1][:1])
    assert [a.tolist() for a in rt.comm] == [comm[0][:1].tolist(), comm[1][:1].tolist()]


@pytest.mark.parametrize("seed", [0, 1])
def test_packed_spans_give_back_the_same_set(seed):
    rng = np.random.default_rng(seed)
    for n, spread in ((0, 1), (1, 1), (500, 1 << 20), (500, 1 << 40)):
        start = np.sort(rng.integers(1 << 60, (1 << 60) + spread * max(n, 1), n))
        spans = (start, start + rng.integers(1, 1 << 36, n))
        packed = PackedSpans.of(spans)
        assert all(np.array_equal(a, b) and b.dtype == np.int64
                   for a, b in zip(spans, packed.spans()))
        moved = packed.shifted(-7).spans()
        assert all(np.array_equal(a - 7, b) for a, b in zip(spans, moved))


def test_header_values_every_rank_repeats_are_shared():
    def header(rank):
        return {"distributedInfo": {"rank": rank, "pg_config": [
            {"pg_name": "0", "ranks": list(range(1024))},
            {"pg_name": f"pp{rank % 8}", "ranks": [rank % 8 + 8 * i for i in range(128)]}]},
            "host_name": "h"}

    shared = SharedHeaderValues()
    a, b, c = header(3), header(11), header(4)
    for h in (a, b, c):
        shared.share(h)
    assert (a, b, c) == (header(3), header(11), header(4))  # nothing changed in value
    default = [h["distributedInfo"]["pg_config"][0] for h in (a, b, c)]
    assert default[0] is default[1] is default[2]
    pp = [h["distributedInfo"]["pg_config"][1]["ranks"] for h in (a, b, c)]
    assert pp[0] is pp[1] and pp[2] is not pp[0]  # ranks 3 and 11 share a pipeline group


def test_transfers_settled_by_chunks_are_the_transfers_settled_at_once(tmp_path, monkeypatch):
    built = build_replicas(tmp_path, one_f_one_b_orders(4, 8), dp=4, latency=150)
    whole = pipeaudit.load(built.directory)
    monkeypatch.setattr(p2p, "CHUNK_RANKS", 4)  # one replica per chunk
    chunked = pipeaudit.load(built.directory)
    assert len(p2p.replica_chunks(chunked.timeline.ranks, chunked.timeline.layout)) == 4
    for a, b in zip(whole.timeline.ranks, chunked.timeline.ranks):
        assert a.rank == b.rank and a.recv_summary.count > 0
        assert_same_recvs(a.recv_summary, b.recv_summary)
        assert b.recv_summary.matched > 0
    assert whole.audit().to_dict() == chunked.audit().to_dict()


def test_transfers_of_several_hosts_settled_by_chunks_are_the_same(tmp_path, monkeypatch):
    """Several hosts: the clocks take every pair of the job, then each chunk's tags are made
    again on the corrected clocks; the chunk size changes nothing."""
    built = build_replicas(tmp_path, one_f_one_b_orders(4, 8), dp=4, latency=150)
    for f in built.files:  # stages 0-1 on one host, 2-3 on another whose clock is 40 µs ahead
        doc = json.loads(f.read_text())
        stage = doc["distributedInfo"]["rank"] // 4  # rank = stage x dp + replica
        doc["host_name"] = "node-a" if stage < 2 else "node-b"
        if stage >= 2:
            for e in doc["traceEvents"]:
                if "ts" in e:
                    e["ts"] += 40
        f.write_text(json.dumps(doc))
    whole = pipeaudit.load(built.directory)
    monkeypatch.setattr(p2p, "CHUNK_RANKS", 4)  # one replica per chunk
    chunked = pipeaudit.load(built.directory)
    assert whole.timeline.clock.offsets_ns and "node-b" in chunked.timeline.clock.offsets_ns
    assert whole.timeline.clock.to_dict() == chunked.timeline.clock.to_dict()
    for a, b in zip(whole.timeline.ranks, chunked.timeline.ranks):
        assert a.rank == b.rank and a.recv_summary.count > 0
        assert_same_recvs(a.recv_summary, b.recv_summary)
    assert whole.audit().to_dict() == chunked.audit().to_dict()


def assert_same_recvs(a, b) -> None:
    """Two ranks' RecvFacts are equal (their waiting intervals element by element)."""
    assert (a.count, a.matched, a.wait_us, a.transfer_us, a.by_stage) == \
        (b.count, b.matched, b.wait_us, b.transfer_us, b.by_stage)
    assert (a.waiting is None) == (b.waiting is None)
    if a.waiting is not None:
        assert all(np.array_equal(x, y) for x, y in zip(a.waiting, b.waiting))
