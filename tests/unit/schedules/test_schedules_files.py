"""User schedule files (CSV / JSON) and profiler-name parsing."""

from __future__ import annotations

import json

import pytest

from pipeaudit.actions import Action
from pipeaudit.errors import ScheduleError
from pipeaudit.schedules import (
    SCHEDULE_NAMES,
    build_schedule,
    detect_schedule,
    format_schedule_csv,
    load_schedule_file,
    parse_action_name,
    save_schedule_file,
)


@pytest.mark.parametrize("name", SCHEDULE_NAMES)
@pytest.mark.parametrize("suffix", [".csv", ".json"])
def test_round_trip(tmp_path, name, suffix):
    s = build_schedule(name, 3, 6)
    path = tmp_path / f"s{suffix}"
    save_schedule_file(s, path)
    loaded = load_schedule_file(path)
    assert loaded.orders == s.orders and loaded.placement == s.placement
    assert loaded.num_microbatches == 6 and loaded.chunks == s.chunks
    assert loaded.split_backward == s.split_backward
    assert loaded.pairs == s.pairs  # dualpipev's OVERLAP_F_B pairs survive the round trip
    assert detect_schedule(loaded.orders, loaded.placement, 6)[0] in (name, "zb-h1")


def test_csv_accepts_torch_dump_layout(tmp_path):
    # torch's _dump_csv writes idle slots as empty cells and may include comm actions
    path = tmp_path / "torch.csv"
    path.write_text(
        "# my schedule\n"
        "0F0,0F1,,0SEND_F1,0B0,0B1\n"
        "rank 1,,1F0,1F1,1B0,PP:1B1\n"
    )
    s = load_schedule_file(path)
    assert s.num_ranks == 2 and s.num_microbatches == 2 and s.placement == (0, 1)
    assert [str(a) for a in s.orders[1]] == ["1F0", "1F1", "1B0", "1B1"]
    assert s.name == "file:torch.csv"


def test_json_forms(tmp_path):
    p = tmp_path / "a.json"
    p.write_text(json.dumps({"name": "mine", "ranks": {"1": ["1F0", "1B0"], "0": ["0F0", "0B0"]}}))
    s = load_schedule_file(p)
    assert s.name == "mine" and s.orders[0] == (Action(0, "F", 0), Action(0, "B", 0))
    p.write_text(json.dumps([["0F0", "(0F1;0B0)OVERLAP_F_B", "0B1"]]))
    s = load_schedule_file(p)
    assert [str(a) for a in s.orders[0]] == ["0F0", "0F1", "0B0", "0B1"]


@pytest.mark.parametrize("content,fragment", [
    ("0F0,0B0\n1F0,0B1\n", "stage 0 appears on rank 0 and on rank 1"),
    ("0F0,0X0\n", "rank 0: not a pipeline action name: '0X0'"),
    ("0F0,0F1,0B0\n", "stage 0 microbatch 1 needs exactly one of 0B1 or 0I1"),
    ("0F0,0I0\n", "0I0 and 0W0 must come together"),
    ("0F0,0B0,0F0\n", "0F0 appears 2 times"),
    ("0B0,0F0\n1F0,1B0\n", "deadlock: rank 0 waits for 0B0 (needs 0F0)"),
    ("\n# nothing\n", "no ranks found"),
    ('{"ranks": "0F0"}', "'ranks' must be a non-empty list of lists"),
    ('{"rank": []}', "needs a 'ranks' list"),
    ('{"ranks": [["0F0", "0B0"]], "num_microbatches": 2}', "'num_microbatches' is 2"),
    ('{"ranks": [["0F0", "0B0"]], "placement": [1]}', "disagrees with the actions' ranks"),
    ("{not json", "invalid JSON"),
    ("0F0,0B0,3F0,3B0\n1F0,1B0\n", "stages [2] have no actions"),
    ("0F0,0B0,2F0,2B0\n1F0,1B0,3F0,3B0,4F0,4B0\n", "every rank must hold the same number of stages"),
])
def test_bad_files_name_the_file_and_the_problem(tmp_path, content, fragment):
    path = tmp_path / "bad.csv"
    path.write_text(content)
    with pytest.raises(ScheduleError) as exc:
        load_schedule_file(path)
    msg = str(exc.value)
    assert msg.startswith(f"{path}: "), msg
    assert fragment in msg, msg
    assert "\n" not in msg


def test_missing_file(tmp_path):
    with pytest.raises(ScheduleError, match="no such file"):
        load_schedule_file(tmp_path / "nope.csv")


def test_parse_action_names():
    assert parse_action_name("PP:2F0") == [Action(2, "F", 0)]
    assert parse_action_name("1I3") == [Action(1, "I", 3)]
    assert parse_action_name("PP:(0F3;3B1)OVERLAP_F_B") == [Action(0, "F", 3), Action(3, "B", 1)]
    for comm in ("PP:1SEND_B3", "PP:0RECV_F1", "PP:0UNSHARD", "PP:0RESHARD", "PP:2REDUCE_GRAD"):
        assert parse_action_name(comm) == []
    assert parse_action_name("Backward 4", stage=2) == [Action(2, "B", 4)]
    with pytest.raises(ScheduleError, match="does not name its stage"):
        parse_action_name("Forward 1")
    with pytest.raises(ScheduleError, match="not a pipeline action name"):
        parse_action_name("aten::mm")


def test_csv_format_is_one_line_per_rank():
    text = format_schedule_csv(build_schedule("gpipe", 2, 2))
    assert text == "0F0,0F1,0B0,0B1\n1F0,1F1,1B0,1B1\n"
