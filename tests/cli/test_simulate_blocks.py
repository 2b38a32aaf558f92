"""``pipeaudit simulate --block`` and ``whatif`` with schedules built from building blocks."""

from __future__ import annotations

import json

import pytest

from pipeaudit.schedules import build_schedule, load_schedule_file
from tests.support.paths import SAMPLES
from tests.support.cli import invoke


def simulate(*args: str):
    return invoke("simulate", *map(str, args))


def test_cli_named_block_equals_the_catalogue_schedule():
    res = simulate("--building-block", "1f1b", "-P", "4", "-M", "8", "--format", "json")
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert d["matches_catalogue"] == ["1f1b"] and d["bubble"]["simulated"] == pytest.approx(3 / 11)
    bb = d["building_block"]
    assert bb["interval"] == 3 and bb["layout_makespan"] == 33
    assert bb["lifespan_rank_peak"] == {"0": 4, "1": 3, "2": 2, "3": 1}


def test_cli_block_file_to_schedule_file_and_back(tmp_path):
    block = tmp_path / "blk.json"
    sched = tmp_path / "s.csv"
    res = simulate("--building-block", "1f1b-v", "-P", "3", "-M", "6", "--save-block", block,
                   "--save-schedule", sched, "--format", "json")
    assert res.exit_code == 0, res.output
    first = json.loads(res.stdout)
    again = json.loads(simulate("--building-block", block, "-M", "6", "--format", "json").stdout)
    assert again["bubble"]["simulated"] == pytest.approx(first["bubble"]["simulated"])
    loaded = load_schedule_file(sched)
    assert loaded.orders == build_schedule("1f1b-v", 3, 6).orders
    from_file = json.loads(simulate("--schedule-file", sched, "--format", "json").stdout)
    assert from_file["matches_catalogue"] == ["1f1b-v"]
    assert from_file["bubble"]["simulated"] == pytest.approx(first["bubble"]["simulated"])


def test_cli_collision_is_one_line_exit_2(tmp_path):
    path = tmp_path / "clash.csv"
    path.write_text("stage,kind,offset\n0,F,0\n1,F,1\n1,B,2\n0,B,4\n")
    res = simulate("--building-block", path, "-M", "4", "--interval", "2")
    assert res.exit_code == 2
    assert res.output.count("\n") == 1 and str(path) in res.output
    assert "0F0 at offset 0 collides with 0B0 at offset 4" in res.output


@pytest.mark.parametrize("args,fragment", [
    (["--building-block", "nosuch", "-P", "4", "-M", "8"], "not a named block"),
    (["--building-block", "1f1b-v", "-M", "8"], "needs -P"),
    (["--building-block", "1f1b", "-P", "4"], "-M/--microbatches is required"),
    (["--building-block", "1f1b", "-P", "4", "-M", "8", "--compare", "gpipe"], "cannot be combined"),
    (["--schedule", "1f1b", "-P", "4", "-M", "8", "--reorder"], "go with --building-block"),
])
def test_cli_block_usage_errors(args, fragment):
    res = simulate(*args)
    assert res.exit_code == 2 and fragment in res.output


def test_whatif_replays_an_added_schedule():
    res = invoke("whatif", str(SAMPLES / "1f1b_p2_m4"),
                 "--schedule", "1f1b-split-lowmem", "--format", "json")
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert d["predicted"]["schedule"] == "1f1b-split-lowmem"
