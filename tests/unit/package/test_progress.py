"""Rank progress: the loader reports each rank done to the active reporter; the CLI's bar
appears only on a terminal and only once the work has taken a while."""

from __future__ import annotations


import pytest

import pipeaudit
from pipeaudit.cli.progress_bar import RankBar, rank_bar
from pipeaudit.progress import active, reporting
from tests.support.paths import SAMPLES

RUN = SAMPLES / "1f1b_p4_m8"


@pytest.mark.parametrize("kw", [{"jobs": 1}, {"jobs": 2, "executor": "processes"}],
                         ids=["in-process", "pool"])
def test_each_rank_is_reported_once(kw):
    seen: list[tuple[int, int]] = []
    with reporting(lambda done, total: seen.append((done, total))):
        pipeaudit.load(RUN, **kw)
    assert seen == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert active() is None  # uninstalled after the block


def test_no_reporter_no_calls():
    assert active() is None
    pipeaudit.load(RUN, jobs=1)  # nothing to call: no error


def test_bar_waits_for_the_delay_then_draws():
    quick = RankBar(delay_s=60)
    quick(1, 4)
    assert quick._bar is None  # a run this fast never shows a bar
    slow = RankBar(delay_s=0)
    try:
        slow(1, 4)
        assert slow._bar is not None
        slow(4, 4)
    finally:
        slow.close()
    assert slow._bar is None


def test_bar_only_on_a_terminal():
    with rank_bar(enabled=False) as bar:
        assert bar is None and active() is None
    with rank_bar(enabled=True) as bar:
        assert isinstance(bar, RankBar) and active() is bar
    assert active() is None
