"""How the suite runs on pytest-xdist's workers: how many, in what order, and which tests alone.

The suite runs on one worker per core, at most four (``-n auto``), a test file per worker at a
time (``--dist loadfile``), in pytest's order: a file of real multi-process runs then mostly
runs beside unit tests (one process each) rather than beside another such file.

A test marked ``exclusive`` compares the timing of real runs it makes (predicted against
measured step times and bubbles): another test beside it on a 2-core machine would be part of
what it measures. Every test holds a lock shared between the workers while it runs (setup, call,
teardown: a module's fixtures included), an exclusive test holds it alone. A second lock, the
turnstile, taken before the first, keeps an exclusive test from waiting forever behind the other
worker's stream of shared holds: while it waits, no new test starts.

Without xdist (``-p no:xdist`` or ``-n 0``) nothing is locked.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

MAX_WORKERS = 4  # the harness's runs spawn a process per rank: more workers only contend


def run_folder(config: pytest.Config) -> Path | None:
    """The folder every worker of this run shares (pytest's ``pytest-N``, which holds each
    worker's ``popen-gwK`` temporary folder and which pytest removes in time); None outside
    an xdist worker."""
    basetemp = getattr(config.option, "basetemp", None)
    if not os.environ.get("PYTEST_XDIST_WORKER") or not basetemp:
        return None
    return Path(basetemp).parent


@contextmanager
def _held(path: Path, mode: int) -> Iterator[None]:
    with open(path, "a+b") as f:
        fcntl.flock(f, mode)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@contextmanager
def running(exclusive: bool, folder: Path | None) -> Iterator[None]:
    """Hold the lock in ``folder`` for one test: shared, or alone when ``exclusive`` (no lock
    without a folder)."""
    if folder is None:
        yield
        return
    turnstile, lock = folder / "pipeaudit-tests.turnstile", folder / "pipeaudit-tests.lock"
    with ExitStack() as holding:
        with _held(turnstile, fcntl.LOCK_EX):  # kept until the lock is granted
            holding.enter_context(_held(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH))
        yield


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "exclusive: times real runs; under xdist no other test runs beside it")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    return max(1, min(MAX_WORKERS, os.cpu_count() or 1))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    with running(item.get_closest_marker("exclusive") is not None, run_folder(item.config)):
        yield
