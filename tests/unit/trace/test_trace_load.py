"""load_traces: many files -> a validated TraceSet (ranks, runs, clocks, parallel decode)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeaudit.errors import TraceError
from pipeaudit.trace import TraceSet, load_traces
from tests.support.synth import simple_rank, trace, write, x
from pipeaudit.trace.validate import format_ranks
from tests.support.paths import HTA, SAMPLES, TORCH_CPU


needs_hta = pytest.mark.skipif(not HTA.is_dir(), reason="shared HTA traces not present")


def _err(*args, **kw) -> str:
    with pytest.raises(TraceError) as info:
        load_traces(*args, **kw)
    assert "\n" not in str(info.value)
    return str(info.value)


def _run(tmp_path: Path, ranks, world_size: int | None = 4, **kw) -> Path:
    for r in ranks:
        write(tmp_path / f"rank{r}.json", simple_rank(r, world_size, **kw))
    return tmp_path


# --------------------------------------------------------------------------- real traces


def test_real_torch_pair_on_one_clock() -> None:
    ts = load_traces([TORCH_CPU])
    assert ts.rank_ids == [0, 1] and ts.world_size == 2 and ts.warnings == []
    assert ts.manifest is None
    r0, r1 = ts[0], ts[1]
    assert r0.base_ns == r1.base_ns
    # rank 0's gloo:send of microbatch 0 waits for rank 1's first recv: on one host and
    # one clock the two end within a few µs of each other
    send = r0.events.filter(r0.events["name"] == "gloo:send").row(0, named=True)
    recv = r1.events.filter(r1.events["name"] == "gloo:recv").row(0, named=True)
    assert abs((send["ts"] + send["dur"]) - (recv["ts"] + recv["dur"])) < 1_000_000
    assert ts.origin_ns == min(r0.start_ns, r1.start_ns)


@pytest.mark.parametrize("run", ["1f1b_p4_m8", "1f1b_p2_m4_memory", "zbv_p2_m4"])
def test_harness_sample_traces(run: str) -> None:
    d = SAMPLES / run
    if not d.is_dir():
        pytest.skip(f"{d} not present")
    ts = load_traces([d])
    assert ts.manifest is not None and ts.warnings == []
    assert ts.rank_ids == list(range(ts.manifest["num_ranks"])) == list(range(ts.world_size))
    assert all(rt.device_type == "cpu" and rt.base_ns > 0 for rt in ts)
    names = set(ts[0].events["name"].to_list())
    assert any(n.startswith(("PP:", "Forward ")) for n in names) or "noannot" in run
    if run.endswith("_memory"):
        assert all(rt.memory.height > 0 for rt in ts)


@needs_hta
def test_nccl128_pair_and_single_rank() -> None:
    pair = load_traces([HTA / "nccl128_sampled_rank0.json.gz", HTA / "nccl128_sampled_rank1.json.gz"])
    assert pair.rank_ids == [0, 1] and pair.world_size == 128
    assert pair.warnings == ["world_size is 128 but only ranks 0, 1 were given; missing ranks 2-127"]
    alone = load_traces([HTA / "nccl128_sampled_rank1.json.gz"])
    assert alone.warnings == ["only 1 of 128 ranks given (rank 1)"]
    gloo = load_traces([HTA / "cpu_only_gloo_rank34.pt.trace.json.gz"])
    assert gloo.rank_ids == [34] and gloo.warnings == ["only 1 of 300 ranks given (rank 34)"]


@needs_hta
def test_single_file_without_rank_info() -> None:
    """One trace without a rank or a world size is rank 0 of a one-process run: no warning
    (where the rank came from is no news)."""
    ts = load_traces([HTA / "amd_mi250_no_rank.json.gz"])
    assert ts.rank_ids == [0]
    assert ts.warnings == []


@needs_hta
def test_shared_traces_without_rank_cannot_be_told_apart() -> None:
    msg = _err([HTA / "amd_mi250_no_rank.json.gz", HTA / "nccl128_sampled_rank1.json.gz"])
    assert msg == (f"cannot tell the ranks apart: {HTA / 'amd_mi250_no_rank.json.gz'} has no "
                   "distributedInfo.rank and no rank in its file name")


@needs_hta
def test_traces_of_different_jobs() -> None:
    msg = _err([HTA / "a100_ddp_ws2_rank0.json.gz", HTA / "nccl128_sampled_rank1.json.gz"])
    assert msg == (f"traces come from different runs: world_size 2 in {HTA / 'a100_ddp_ws2_rank0.json.gz'}, "
                   f"128 in {HTA / 'nccl128_sampled_rank1.json.gz'}")


# --------------------------------------------------------------------------- rank rules


def test_duplicate_ranks(tmp_path: Path) -> None:
    write(tmp_path / "a.json", simple_rank(1, 2))
    write(tmp_path / "b.json", simple_rank(1, 2))
    assert _err([tmp_path]) == (f"rank 1 is in two files: {tmp_path / 'a.json'} and {tmp_path / 'b.json'} "
                                "(several profiling cycles or runs? pass one file per rank)")


def test_missing_ranks_with_a_hole_is_an_error(tmp_path: Path) -> None:
    _run(tmp_path, [0, 2])
    assert _err([tmp_path]) == (
        "world_size is 4 but only ranks 0, 2 were given; missing ranks 1, 3 "
        "(pass allow_missing=True, or --allow-missing, to analyse an incomplete set)")
    ts = load_traces([tmp_path], allow_missing=True)
    assert ts.rank_ids == [0, 2]
    assert ts.warnings == ["world_size is 4 but only ranks 0, 2 were given; missing ranks 1, 3"]


def test_contiguous_block_is_a_warning(tmp_path: Path) -> None:
    _run(tmp_path, [0, 1, 2])
    ts = load_traces([tmp_path])
    assert ts.warnings == ["world_size is 4 but only ranks 0-2 were given; missing rank 3"]


def test_complete_set(tmp_path: Path) -> None:
    _run(tmp_path, [3, 1, 0, 2])
    ts = load_traces([tmp_path])
    assert isinstance(ts, TraceSet) and ts.rank_ids == [0, 1, 2, 3] and ts.warnings == []
    assert ts[2].rank == 2 and 3 in ts and 4 not in ts and len(ts) == 4
    with pytest.raises(KeyError):
        ts[7]


def test_ranks_from_file_names(tmp_path: Path) -> None:
    for r in (0, 1):
        write(tmp_path / f"job_rank{r}.json", trace([x("a", 1_700_000_000_000_000 + r, 5)]))
    ts = load_traces([tmp_path])
    assert ts.rank_ids == [0, 1] and ts.world_size is None
    assert ts.warnings == [
        "rank 0 (job_rank0.json): no distributedInfo.rank; rank taken from file name (rank 0)",
        "rank 1 (job_rank1.json): no distributedInfo.rank; rank taken from file name (rank 1)",
    ]
    write(tmp_path / "job_rank3.json", trace([x("a", 1_700_000_000_000_000, 5)]))
    assert _err([tmp_path]) == (
        "ranks 0, 1, 3 were given but not rank 2 (the traces do not say their world_size) "
        "(pass allow_missing=True, or --allow-missing, to analyse an incomplete set)")


def test_several_files_without_ranks(tmp_path: Path) -> None:
    write(tmp_path / "host_1.100.pt.trace.json", trace([x("a", 1, 1)]))
    write(tmp_path / "host_2.200.pt.trace.json", trace([x("a", 1, 1)]))
    assert _err([tmp_path]) == (
        f"cannot tell the ranks apart: {tmp_path / 'host_1.100.pt.trace.json'}, "
        f"{tmp_path / 'host_2.200.pt.trace.json'} have no distributedInfo.rank and no rank in their file names")


def test_rank_beyond_world_size_from_file_name(tmp_path: Path) -> None:
    write(tmp_path / "rank0.json", simple_rank(0, 2))
    write(tmp_path / "rank5.json", trace([x("a", 1_700_000_000_000_000, 5)]))
    assert _err([tmp_path]) == f"rank 5 ({tmp_path / 'rank5.json'}) is not below world_size 2"


def test_manifest_world_size_used(tmp_path: Path) -> None:
    for r in (0, 1):
        write(tmp_path / f"rank{r}.json", trace([x("a", 1_700_000_000_000_000, 5)]))
    write(tmp_path / "manifest.json", {"num_ranks": 4, "schedule": "1f1b"})
    ts = load_traces([tmp_path])
    assert ts.manifest == {"num_ranks": 4, "schedule": "1f1b"}
    assert ts.warnings[0] == "world_size is 4 but only ranks 0, 1 were given; missing ranks 2, 3"
    (tmp_path / "manifest.json").write_text("{broken")
    ts = load_traces([tmp_path])
    assert ts.manifest is None and ts.warnings[0].startswith(f"{tmp_path / 'manifest.json'}: manifest ignored")


# --------------------------------------------------------------------------- runs and clocks


def test_different_runs_far_apart_in_time(tmp_path: Path) -> None:
    write(tmp_path / "rank0.json", simple_rank(0, 2, t0_us=1_700_000_000_000_000.0))
    write(tmp_path / "rank1.json", simple_rank(1, 2, t0_us=1_700_000_000_000_000.0 + 7200e6))
    assert _err([tmp_path]) == (
        "traces come from different runs or profiling windows: rank 0 (2023-11-14 22:13:20.000 UTC to "
        "2023-11-14 22:13:20.001 UTC) and rank 1 (2023-11-15 00:13:20.000 UTC to 2023-11-15 00:13:20.001 UTC) "
        "are 2.0 h apart")


def test_nearby_non_overlapping_ranks_are_fine(tmp_path: Path) -> None:
    write(tmp_path / "rank0.json", simple_rank(0, 2, t0_us=1_700_000_000_000_000.0))
    write(tmp_path / "rank1.json", simple_rank(1, 2, t0_us=1_700_000_000_000_000.0 + 5e6))  # 5 s later
    assert load_traces([tmp_path]).warnings == []


def test_different_backend(tmp_path: Path) -> None:
    write(tmp_path / "rank0.json", simple_rank(0, 2, backend="nccl"))
    write(tmp_path / "rank1.json", simple_rank(1, 2, backend="gloo"))
    assert _err([tmp_path]) == (f"traces come from different runs: backend nccl in {tmp_path / 'rank0.json'}, "
                                f"gloo in {tmp_path / 'rank1.json'}")


def test_clock_and_host_warnings(tmp_path: Path) -> None:
    write(tmp_path / "rank0.json", simple_rank(0, 2, t0_us=5_000_000.0, host_name="a"))
    write(tmp_path / "rank1.json", simple_rank(1, 2, t0_us=5_000_000.0, host_name="b"))
    ws = load_traces([tmp_path]).warnings
    assert ws[0].startswith("rank 0 (rank0.json): timestamps are not wall-clock times")
    assert ws[2] == ("ranks ran on 2 hosts (a, b): their clocks are assumed synchronised (NTP); "
                     "clock skew between hosts is not corrected")


def test_bad_file_in_set_names_it(tmp_path: Path) -> None:
    _run(tmp_path, [0, 1])
    (tmp_path / "rank2.json").write_text('{"traceEvents": [')
    assert _err([tmp_path]) == f"{tmp_path / 'rank2.json'}: truncated JSON (the file ends in the middle of the document)"


# --------------------------------------------------------------------------- parallel


def test_parallel_equals_sequential(tmp_path: Path) -> None:
    _run(tmp_path, [0, 1, 2, 3])
    write(tmp_path / "rank0.json", trace([x("a", 1_700_000_000_000_000.5, 5)], rank=0, world_size=4))
    seq = load_traces([tmp_path], jobs=1)
    par = load_traces([tmp_path], jobs=2)
    assert seq.rank_ids == par.rank_ids and seq.warnings == par.warnings
    for a, b in zip(seq, par):
        assert a.events.equals(b.events) and a.memory.equals(b.memory)
        assert (a.path, a.rank, a.rank_source, a.base_ns, a.header, a.warnings) == (
            b.path, b.rank, b.rank_source, b.base_ns, b.header, b.warnings)
    (tmp_path / "rank3.json").write_text('{"traceEvents": 5}')
    assert _err([tmp_path], jobs=2) == (f"{tmp_path / 'rank3.json'}: not a trace: traceEvents is a number, "
                                        "expected a list of events")


def test_format_ranks() -> None:
    assert format_ranks([]) == ""
    assert format_ranks([3, 1]) == "1, 3"
    assert format_ranks([0, 1, 2, 3, 7, 9, 10]) == "0-3, 7, 9, 10"


def test_single_rank_with_small_times_has_no_clock_warning(tmp_path: Path) -> None:
    write(tmp_path / "rank0.json", trace([x("a", 10, 5)], rank=0, world_size=1))
    assert load_traces([tmp_path]).warnings == []
