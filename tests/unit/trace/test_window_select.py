"""Which window of a folder of profiling cycles a command reads (pipeaudit.trace.window_select),
on real traces copied as each writer lays them out (known answers)."""

from __future__ import annotations

import shutil

import pytest

import pipeaudit.trace.windows as windows_module
from pipeaudit.errors import ConfigError, TraceError
from pipeaudit.trace.window_index import window_folder, write_entry
from pipeaudit.trace.window_select import canonical, select_windows
from tests.support.paths import SAMPLES

RUN = SAMPLES / "1f1b_p4_m8"


def _ranks(dst, ranks=range(4), name="rank{r}_trace.json.gz"):
    dst.mkdir(parents=True, exist_ok=True)
    for r in ranks:
        shutil.copy(RUN / f"rank{r}.json.gz", dst / name.format(r=r))


@pytest.mark.parametrize("typed, label", [("step_00000004", "step 4"), ("step-4", "step 4"),
                                          ("run/ step 4", "run/step 4"),
                                          ("profile_trace/iteration_03/", "profile trace/iteration 3"),
                                          ("Step_0_Cycle_2", "step 0 cycle 2")])
def test_canonical_labels(typed, label):
    assert canonical(typed) == label


def test_one_file_per_rank_is_read_as_given_from_the_first_bytes_only(tmp_path, monkeypatch):
    _ranks(tmp_path / "run")

    def whole_file(_path):  # a pass over every file would cost as much as reading them
        raise AssertionError("read the whole file")

    monkeypatch.setattr(windows_module, "read_info", whole_file)
    sel = select_windows([tmp_path / "run"])
    (w,) = sel.windows
    assert sel.given == [str(tmp_path / "run")] and sel.paths(w) == sel.given
    assert (w.label, w.ranks, w.world_size, sel.note) == ("run", [0, 1, 2, 3], 4, None)


def test_latest_is_the_last_complete_window(tmp_path):
    _ranks(tmp_path / "iteration_10")
    _ranks(tmp_path / "iteration_20", ranks=(0, 1, 2))
    sel = select_windows([tmp_path])
    assert [w.label for w in sel.windows] == ["iteration_10", "iteration_20"]
    assert sel.chosen[0].label == "iteration_10" and sel.windows[1].missing == [3]
    assert "read iteration_10, the latest complete one (iteration_20 misses ranks)" in sel.note
    assert select_windows([tmp_path], "iteration_20").chosen[0].missing == [3]
    assert [w.label for w in select_windows([tmp_path], "all").chosen] == \
        ["iteration_10", "iteration_20"]


def test_handler_window_folder_and_index_as_the_root(tmp_path):
    for step in (4, 8):
        for r in range(4):
            name = f"host_{100 + r}.{step}00{r}.pt.trace.json.gz"
            shutil.copy(RUN / f"rank{r}.json.gz", tmp_path / name)
            write_entry(window_folder(tmp_path, step), r, 4, name, step)
    assert select_windows([tmp_path]).chosen[0].label == "step 8"
    assert [w.label for w in select_windows([tmp_path / "pipeaudit"], "all").chosen] == \
        ["step 4", "step 8"]
    sel = select_windows([window_folder(tmp_path, 4)])
    assert [w.label for w in sel.windows] == ["step 4"] and sel.note is None
    assert [f.parent for f in sel.chosen[0].files] == [tmp_path] * 4


def test_files_named_one_by_one_split_into_cycles(tmp_path):
    for k in (1, 2):
        _ranks(tmp_path, name=f"host_{{r}}.{k}000.pt.trace.json.gz")
    files = sorted(tmp_path.iterdir())
    sel = select_windows(files, "all")
    assert [w.label for w in sel.chosen] == ["step 0 cycle 1", "step 0 cycle 2"]
    assert [p.name for p in sel.chosen[1].files] == \
        [f"host_{r}.2000.pt.trace.json.gz" for r in range(4)]


def test_a_label_must_name_one_window(tmp_path):
    _ranks(tmp_path / "a" / "iteration_1")
    _ranks(tmp_path / "b" / "iteration_1")
    with pytest.raises(ConfigError, match="names 2 windows .*a/iteration_1, b/iteration_1"):
        select_windows([tmp_path], "iteration_1")
    assert select_windows([tmp_path], "b/iteration_1").chosen[0].folder == tmp_path / "b" / \
        "iteration_1"
    with pytest.raises(ConfigError, match="holds no such window"):
        select_windows([tmp_path], "iteration_2")


def test_empty_and_traceless_folders_say_so(tmp_path):
    with pytest.raises(TraceError, match="empty directory"):
        select_windows([tmp_path])
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(TraceError, match="no trace files"):
        select_windows([tmp_path])


def test_the_api_loads_one_window(tmp_path):
    import pipeaudit

    for k, src in ((1, RUN), (2, SAMPLES / "1f1b_p4_m8_imb_s1x3")):
        for r in range(4):
            shutil.copy(src / f"rank{r}.json.gz", tmp_path / f"host_{r}.{k}000.pt.trace.json.gz")
    latest = pipeaudit.load(tmp_path, window="latest").audit().bubble.measured
    first = pipeaudit.load(tmp_path, window="step_0_cycle_1").audit().bubble.measured
    assert latest == pipeaudit.load(SAMPLES / "1f1b_p4_m8_imb_s1x3").audit().bubble.measured
    assert first == pipeaudit.load(RUN).audit().bubble.measured
    with pytest.raises(ConfigError, match="load reads one window"):
        pipeaudit.load(tmp_path, window="all")
    with pytest.raises(TraceError, match="rank 0 is in two files"):  # as given: both cycles
        pipeaudit.load(tmp_path)
