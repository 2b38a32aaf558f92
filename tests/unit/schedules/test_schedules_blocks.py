"""Schedules built from building blocks: rebuild, collisions, memory, reorder, files
(``simulate --block``: ``tests/cli/test_simulate_blocks.py``)."""

from __future__ import annotations

import math

import pytest

from pipeaudit.errors import ScheduleError
from pipeaudit.schedules import build_schedule, peak_inflight_of_orders, replay, uniform_durations
from pipeaudit.schedules.block_files import format_block_json, load_block_file
from pipeaudit.schedules.block_library import named_block
from pipeaudit.schedules.blocks import (
    BuildingBlock,
    Pass,
    build_from_block,
    check_block,
    collisions,
    layout_makespan,
    lifespan_peaks,
    lifespan_rank_peaks,
    rank_peaks,
)
from pipeaudit.schedules.model import loop_placement
from pipeaudit.schedules.reorder import reorder_ends

ADDED = ("1f1b-v", "1f1b-split-lowmem", "interleaved-1f1b-lowmem")


# ------------------------------------------------------------------ rebuild the catalogue


@pytest.mark.parametrize("name", ["1f1b", "eager-1f1b"])
def test_1f1b_and_eager_1f1b_rebuilt_from_their_blocks_equal_the_catalogue(name):
    compared = 0
    for P in range(1, 7):
        for M in range(1, 3 * P + 3):
            try:
                want = build_schedule(name, P, M)
            except ScheduleError:  # 1f1b needs M >= P; the block itself builds any M
                continue
            got = build_from_block(named_block(name, P), M)
            assert got.orders == want.orders and got.placement == want.placement, (name, P, M)
            compared += 1
    assert compared > 40


def test_squeezing_keeps_the_order_and_removes_the_slack_of_eager_1f1b():
    block = named_block("eager-1f1b", 4)
    s = build_from_block(block, 8)
    squeezed = replay(s.orders, s.placement, uniform_durations(1, 2))
    # laid out with one T_F after every forward and one T_B after every backward ...
    assert layout_makespan(block, 8) > squeezed.makespan
    # ... squeezed, eager 1F1B has 1F1B's step: (M + P - 1)(T_F + T_B)
    assert squeezed.makespan == pytest.approx((8 + 3) * 3)


# -------------------------------------------------------------------------- collisions


def _block(passes, interval, P=2):
    return BuildingBlock("test", loop_placement(P, 1), tuple(Pass(*p) for p in passes), interval,
                         {"F": 1.0, "B": 2.0, "I": 1.0, "W": 1.0})


def test_a_colliding_block_is_refused_naming_the_passes():
    # rank 0: F at [0, 1) and B at [4, 6); repeated every 2 the B's copy at [2, 4) ... [0, 2)
    block = _block([(0, "F", 0), (1, "F", 1), (1, "B", 2), (0, "B", 4)], 2)
    assert collisions(block)
    with pytest.raises(ScheduleError) as exc:
        check_block(block)
    msg = str(exc.value)
    assert "0F0 at offset 0 collides with 0B0 at offset 4 on rank 0" in msg
    assert "repeats every 2" in msg and "\n" not in msg
    # the same passes every 3 fit: no collision, and the order is 1F1B's
    ok = _block([(0, "F", 0), (1, "F", 1), (1, "B", 2), (0, "B", 4)], 3)
    assert not collisions(ok)
    assert build_from_block(ok, 5).orders == build_schedule("1f1b", 2, 5).orders


def test_collisions_wrap_around_the_interval():
    # B on rank 0 at [5, 7) wraps to [5, 6) and [0, 1) of the next copy: meets the F at 0
    block = _block([(0, "F", 0), (1, "F", 1), (1, "B", 2), (0, "B", 5)], 6)
    assert [(str(a), str(b)) for a, b in collisions(block)] == [
        ("0F0 at offset 0", "0B0 at offset 5")]


@pytest.mark.parametrize("passes,fragment", [
    ([(0, "F", 0), (1, "F", 0), (1, "B", 2), (0, "B", 4)], "1F0 at offset 0 starts before its input 0F0"),
    ([(0, "F", 0), (1, "F", 1), (1, "B", 2)], "stage 0 microbatch 0 needs one F and one B"),
    ([(0, "F", 0), (1, "F", 1), (1, "B", 2), (0, "B", 4), (0, "W", 6)], "needs one F and one B"),
    ([(0, "X", 0)], "kind must be one of F, B, I, W"),
    ([(0, "F", 0), (1, "F", 1), (1, "B", 2), (0, "B", 4), (3, "F", 0)], "there are"),
])
def test_malformed_blocks_name_the_pass(passes, fragment):
    with pytest.raises(ScheduleError, match=fragment.replace("(", r"\(")):
        check_block(_block(passes, 3))


# ---------------------------------------------------------------- memory of the blocks


@pytest.mark.parametrize("name", ["1f1b", "eager-1f1b", *ADDED])
def test_the_block_fixes_the_peak_memory_lifespan_over_interval(name):
    """Qi et al. 2024: a stage's peak activation is ceil(lifespan / interval) microbatches
    (summed over a rank's stages at one instant): the order's in-flight count equals it once
    M is large, whatever the durations the order is replayed with."""
    for P in range(2, 8):
        block = named_block(name, P)
        s = build_from_block(block, 6 * P)
        assert peak_inflight_of_orders(s.orders, s.placement) == lifespan_peaks(block), (name, P)
        assert rank_peaks(s) == pytest.approx(lifespan_rank_peaks(block)), (name, P)
        if block.microbatches == 1:
            spans = {p.stage: p.offset for p in block.passes if p.kind == "F"}
            for p in block.passes:
                if p.kind in ("B", "I"):
                    life = block.end(p) - spans[p.stage]
                    assert lifespan_peaks(block)[p.stage] == math.ceil(life / block.interval - 1e-9)


def test_1f1b_v_holds_what_the_authors_implementation_holds():
    """Every rank of 1F1B-V peaks at ceil((2P+1)/3) microbatches of its model share: the peak of
    every rank of the authors' implementation (v1f1b.py of sail-sg/zero-bubble-pipeline-
    parallelism, run for P = 2..10: 2, 3, 3, 4, 5, 5, 6, 7, 7), about 2/3 of 1F1B's P."""
    authors = {2: 2, 3: 3, 4: 3, 5: 4, 6: 5, 7: 5, 8: 6, 9: 7, 10: 7}
    for P, peak in authors.items():
        s = build_schedule("1f1b-v", P, 3 * P)
        assert s.placement == tuple(list(range(P)) + list(reversed(range(P))))
        assert {a.kind for o in s.orders for a in o} == {"F", "B"}  # no B/W split
        assert max(rank_peaks(s).values()) == peak == math.ceil((2 * P + 1) / 3)
        one_f = build_schedule("1f1b", P, 3 * P)
        assert max(rank_peaks(s).values()) <= max(rank_peaks(one_f).values())


def test_split_lowmem_holds_two_thirds_of_1f1b():
    """The source: 'Schedule with 2/3rd 1F1B memory by utilising B-W split ... two microbatches
    in a single building block to avoid collision'. Stage s holds ceil(2(P-s)/3), 1F1B P-s."""
    for P in range(2, 11):
        block = named_block("1f1b-split-lowmem", P)
        assert block.microbatches == 2 and not collisions(block)
        s = build_schedule("1f1b-split-lowmem", P, 4 * P)
        want = {st: math.ceil(2 * (P - st) / 3) for st in range(P)}
        assert peak_inflight_of_orders(s.orders, s.placement) == want
        one = build_schedule("1f1b", P, 4 * P)
        assert peak_inflight_of_orders(one.orders, one.placement) == {st: P - st for st in range(P)}
    # one microbatch per block would collide for some stage: F and I of stage s meet when
    # 2P-1-2s is a multiple of 3
    P = 4
    one_mb = BuildingBlock("one", loop_placement(P, 1), tuple(
        [Pass(s, "F", s) for s in range(P)] + [Pass(s, "I", 2 * P - 1 - s) for s in range(P)]
        + [Pass(s, "W", 2 * P - s) for s in range(P)]), 3.0, {"F": 1.0, "I": 1.0, "W": 1.0})
    assert collisions(one_mb)


def test_interleaved_lowmem_holds_less_than_interleaved_1f1b():
    for P in range(2, 9):
        for v in (2, 3):
            low = build_schedule("interleaved-1f1b-lowmem", P, 2 * P, v)
            it = build_schedule("interleaved-1f1b", P, 2 * P, v)
            assert low.placement == it.placement
            assert max(rank_peaks(low).values()) < max(rank_peaks(it).values()), (P, v)


@pytest.mark.parametrize("name", ADDED)
def test_added_schedules_are_complete_and_simulate(name):
    for P in (2, 3, 5):
        s = build_schedule(name, P, 2 * P)
        for st in range(s.num_stages):
            for m in range(2 * P):
                kinds = sorted(a.kind for o in s.orders for a in o
                               if a.stage == st and a.microbatch == m)
                assert kinds in (["B", "F"], ["F", "I", "W"])
        r = replay(s.orders, s.placement, uniform_durations(1.0, 2.0))
        assert 0 < r.bubble < 0.5


# ---------------------------------------------------------------------------- reorder


def test_reorder_keeps_the_passes_and_never_raises_a_peak():
    for name, P in (("1f1b-v", 3), ("1f1b-v", 6), ("interleaved-1f1b-lowmem", 4), ("1f1b-split-lowmem", 5)):
        block = named_block(name, P)
        s = build_from_block(block, 3 * P)
        r = build_from_block(block, 3 * P, reorder=True)
        assert [sorted(o) for o in r.orders] == [sorted(o) for o in s.orders]
        assert rank_peaks(r) == rank_peaks(s)
        for st, peak in peak_inflight_of_orders(r.orders, r.placement).items():
            assert peak <= peak_inflight_of_orders(s.orders, s.placement)[st]
        replay(r.orders, r.placement, uniform_durations(1, 2))  # no deadlock


def test_reorder_shortens_the_warm_up_of_1f1b_v():
    # P=3, M=9, T_F=1, T_B=2 (the block's own durations): the forwards of the second chunk of
    # rank 0 run in the warm-up's idle slots
    block = named_block("1f1b-v", 3)
    s = build_from_block(block, 9)
    r = reorder_ends(s, block.durations)
    before = replay(s.orders, s.placement, uniform_durations(1, 2))
    after = replay(r.orders, r.placement, uniform_durations(1, 2))
    assert after.makespan < before.makespan
    assert r.orders != s.orders


# ------------------------------------------------------------------------------- files


def test_block_file_round_trip(tmp_path):
    block = named_block("1f1b-split-lowmem", 3)
    path = tmp_path / "b.json"
    path.write_text(format_block_json(block))
    again = load_block_file(path)
    assert again.passes == block.passes and again.placement == block.placement
    assert again.interval == block.interval
    assert build_from_block(again, 7).orders == build_from_block(block, 7).orders


def test_csv_block_with_settings_from_the_command_line(tmp_path):
    path = tmp_path / "v.csv"
    block = named_block("1f1b-v", 2)
    path.write_text("stage,kind,offset\n# 1F1B-V, P=2\n"
                    + "\n".join(f"{p.stage},{p.kind},{p.offset:g}" for p in block.passes) + "\n")
    loaded = load_block_file(path, placement="v", interval=6)
    assert loaded.placement == block.placement and loaded.num_ranks == 2
    assert build_from_block(loaded, 6).orders == build_schedule("1f1b-v", 2, 6).orders


@pytest.mark.parametrize("text,fragment", [
    ("{", "invalid JSON"),
    ('{"passes": []}', "non-empty 'passes'"),
    ('{"passes": [[0, "F"]]}', "pass 0: expected"),
    ('{"placement": "zigzag", "passes": [[0, "F", 0], [0, "B", 1]]}', "placement must be"),
    ('{"placement": "v", "passes": [[0, "F", 0], [0, "B", 1]]}', "V placement needs"),
    ("stage,kind,offset\n0,F,x\n", "line 2: offset must be a number"),
    ("0,F\n", "line 1: expected stage,kind,offset"),
])
def test_bad_block_files_name_the_file(tmp_path, text, fragment):
    path = tmp_path / "bad.txt"
    path.write_text(text)
    with pytest.raises(ScheduleError) as exc:
        load_block_file(path)
    assert str(exc.value).startswith(f"{path}: ") and fragment in str(exc.value)
