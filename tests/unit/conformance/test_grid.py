"""The conformance grid: its size, its coverage of every dimension, and the CI slice."""

from __future__ import annotations

from pipeaudit.conformance.cells import CI_SLICE, REGRESSION_CELLS, Cell, full_grid


def test_grid_has_every_dimension_and_at_least_60_runnable_cells():
    grid = full_grid()
    assert len(grid) >= 60
    assert len({c.name for c in grid}) == len(grid)
    assert all(c.problem() is None for c in grid)
    seen = lambda attr: {getattr(c, attr) for c in grid}  # noqa: E731
    assert seen("framework") == {"torch", "deepspeed", "megatron"}
    assert seen("P") >= {2, 3, 4}
    assert seen("grid") == {"pp-outer", "dp-outer"} and seen("dp") == {1, 2}
    assert seen("imbalance") == {"none", "mid3", "first2", "last2"}
    assert seen("checkpointing") == seen("tied") == seen("step_marks") == {True, False}
    assert seen("reading") == {"all", "one", "shuffled", "ops"}
    assert any(c.M < c.P for c in grid) and any(c.M == 2 * c.P + 1 for c in grid)
    torch_schedules = {c.schedule for c in grid if c.framework == "torch"}
    assert {"naive", "gpipe", "1f1b", "interleaved-1f1b", "zbv", "dualpipev"} <= torch_schedules


def test_the_shapes_that_broke_earlier_readings_are_cells():
    names = {c.name for c in full_grid()}
    assert {c.name for c in REGRESSION_CELLS} <= names
    assert "deepspeed-1f1b-p2-m4-dp2-dpouter" in names and "deepspeed-1f1b-p4-m6-ckpt" in names


def test_ci_slice_covers_every_framework_and_shape():
    assert len(CI_SLICE) >= 12 and all(c.problem() is None for c in CI_SLICE)
    assert {c.framework for c in CI_SLICE} == {"torch", "deepspeed", "megatron"}
    assert {c.grid for c in CI_SLICE if c.dp > 1} == {"dp-outer"}
    for flag in ("checkpointing", "tied"):
        assert any(getattr(c, flag) for c in CI_SLICE)
    assert any(not c.step_marks for c in CI_SLICE)
    assert {"all", "one", "shuffled", "ops"} == {c.reading for c in CI_SLICE}
    # torch's multi-stage schedules from the ops alone, a split backward (I and W) among them,
    # each held to its shape (none may answer "cannot tell")
    ops = [c for c in CI_SLICE if c.reading == "ops"]
    assert {"looped-bfs", "zbv"} <= {c.schedule for c in ops}
    assert not any(c.may_be_uncertain for c in full_grid())
    assert any(c.M < c.P for c in CI_SLICE) and any(c.imbalance != "none" for c in CI_SLICE)


def test_cells_read_alike_share_one_run_and_one_rank_is_a_middle_position():
    a = Cell("deepspeed", "1f1b", 2, 4, dp=2, grid="dp-outer")
    b = Cell("deepspeed", "1f1b", 2, 4, dp=2, grid="dp-outer", reading="one")
    assert a.run_key == b.run_key == a.name and b.name.endswith("-rank1")
    assert b.layout_given == "dp=2,pp=2" and a.layout_given is None
    pp_outer = Cell("deepspeed", "1f1b", 2, 4, dp=2, reading="one")
    assert pp_outer.one_rank == 2 and pp_outer.config("x").layout.coords(2)["pp"] == 1
    assert Cell(imbalance="last2", P=3).imbalance_map == {2: 2}
