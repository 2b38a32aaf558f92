"""Window discovery on real traces laid out as each writer leaves them (known answers)."""

from __future__ import annotations

import shutil
import time

import pytest

from pipeaudit.trace.window_index import read_entries, window_folder, write_entry
from pipeaudit.trace.traceinfo import read_info
from pipeaudit.trace.windows import WindowFinder
from tests.support.paths import SAMPLES

RUN = SAMPLES / "1f1b_p4_m8"
SLOW = SAMPLES / "1f1b_p4_m8_imb_s1x3"


def _copy_run(src, dst, ranks=range(4)):
    dst.mkdir(parents=True)
    for r in ranks:
        shutil.copy(src / f"rank{r}.json.gz", dst / f"rank{r}_trace.json.gz")


def later(seconds: float):
    """A clock ``seconds`` ahead of now (files copied now have settled by then)."""
    return lambda: time.time() + seconds


def test_trace_info_reads_rank_world_and_first_step():
    info = read_info(RUN / "rank2.json.gz")
    assert (info.rank, info.world_size, info.first_step) == (2, 4, 0)


def test_iteration_folders_are_windows(tmp_path):
    _copy_run(RUN, tmp_path / "profile_trace" / "iteration_10")
    _copy_run(SLOW, tmp_path / "profile_trace" / "iteration_20")
    finder = WindowFinder(tmp_path, settle_s=1.0, clock=later(5))
    got = finder.poll()
    assert [w.label for w in got] == ["profile_trace/iteration_10", "profile_trace/iteration_20"]
    assert all(w.complete and w.world_size == 4 and w.ranks == [0, 1, 2, 3] for w in got)
    assert finder.poll() == []  # each window once


def test_files_still_being_written_wait(tmp_path):
    _copy_run(RUN, tmp_path / "iteration_10")
    assert WindowFinder(tmp_path, settle_s=60.0).poll() == []
    assert len(WindowFinder(tmp_path, settle_s=60.0).poll(final=True)) == 1


def test_missing_rank_waits_for_the_timeout_then_is_audited_without_it(tmp_path):
    _copy_run(RUN, tmp_path / "iteration_10", ranks=(0, 1, 2))
    assert WindowFinder(tmp_path, settle_s=1.0, rank_timeout_s=30.0, clock=later(5)).poll() == []
    (w,) = WindowFinder(tmp_path, settle_s=1.0, rank_timeout_s=30.0, clock=later(31)).poll()
    assert w.missing == [3] and w.ranks == [0, 1, 2] and not w.complete


def test_handler_index_names_the_files_and_the_world(tmp_path):
    for r in range(4):  # torch's names, one window of the handler
        shutil.copy(RUN / f"rank{r}.json.gz", tmp_path / f"host_{100 + r}.{r}000.pt.trace.json.gz")
        write_entry(window_folder(tmp_path, 7), r, 4, f"host_{100 + r}.{r}000.pt.trace.json.gz", 7)
    entries = read_entries(window_folder(tmp_path, 7))
    assert [e.rank for e in entries] == [0, 1, 2, 3] and entries[0].trace.parent == tmp_path
    (w,) = WindowFinder(tmp_path, settle_s=1.0, clock=later(5)).poll()
    assert (w.label, w.step, w.world_size, len(w.files)) == ("step 7", 7, 4, 4)
    assert w.folder == window_folder(tmp_path, 7)


def test_flat_folder_of_two_runs_with_the_same_steps_is_one_directory_each(tmp_path):
    """Files that start at the same ProfilerStep in one folder are one window: two runs in
    one flat folder need their own folders (the handler's index or iteration_N)."""
    _copy_run(RUN, tmp_path / "a")
    (w,) = WindowFinder(tmp_path, settle_s=1.0, clock=later(5)).poll()
    assert w.label == "a" and w.step == 0


@pytest.mark.parametrize("bad", ["notes.json", "manifest.json"])
def test_non_traces_are_ignored(tmp_path, bad):
    (tmp_path / bad).write_text('{"a": 1}')
    assert WindowFinder(tmp_path, settle_s=0.0, clock=later(5)).poll(final=True) == []
