"""The suite's lock (tests/support/parallel.py): an exclusive test waits for the tests beside
it to end, and no test starts while it waits or runs."""

from __future__ import annotations

import threading
import time

from tests.support.parallel import running


def _hold(name: str, exclusive: bool, folder, order: list, release: threading.Event,
          started: threading.Event) -> None:
    started.set()
    with running(exclusive, folder):
        order.append(f"{name} in")
        release.wait(10)
        order.append(f"{name} out")


def test_exclusive_waits_and_holds_back_later_tests(tmp_path):
    order: list[str] = []
    go = {n: threading.Event() for n in "ABC"}
    started = {n: threading.Event() for n in "ABC"}
    threads = {n: threading.Thread(target=_hold,
                                   args=(n, n == "B", tmp_path, order, go[n], started[n]))
               for n in "ABC"}
    threads["A"].start()  # a shared test running
    while "A in" not in order:
        time.sleep(0.01)
    threads["B"].start()  # the exclusive one waits for it
    started["B"].wait(5)
    time.sleep(0.3)
    threads["C"].start()  # a shared one arriving while B waits: held back
    started["C"].wait(5)
    time.sleep(0.3)
    assert order == ["A in"]
    go["A"].set()
    while "B in" not in order:
        time.sleep(0.01)
    time.sleep(0.3)
    assert order == ["A in", "A out", "B in"]
    go["B"].set()
    go["C"].set()
    for t in threads.values():
        t.join(10)
    assert order == ["A in", "A out", "B in", "B out", "C in", "C out"]


def test_no_lock_without_a_folder():
    with running(True, None), running(True, None):  # would deadlock if it locked
        pass
