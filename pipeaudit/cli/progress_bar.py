"""A rank-progress bar on stderr for commands that read big runs (only on a terminal)."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pipeaudit.progress import reporting

#: Seconds of work before the bar appears: small runs finish without one.
DELAY_S = 1.0


class RankBar:
    """``report(done, total)`` drawing "ranks 3/8" with rich, once the work has taken
    :data:`DELAY_S`; transient (gone when the command prints its report)."""

    def __init__(self, delay_s: float = DELAY_S) -> None:
        self._start = time.monotonic()
        self._delay = delay_s
        self._lock = threading.Lock()
        self._bar: Any = None
        self._task: Any = None

    def __call__(self, done: int, total: int) -> None:
        with self._lock:
            if self._bar is None:
                if done >= total or time.monotonic() - self._start < self._delay:
                    return
                from rich.console import Console
                from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                           TimeElapsedColumn)

                self._bar = Progress(TextColumn("ranks decoded"), BarColumn(),
                                     MofNCompleteColumn(), TimeElapsedColumn(),
                                     console=Console(stderr=True), transient=True)
                self._bar.start()
                self._task = self._bar.add_task("ranks", total=total)
            self._bar.update(self._task, completed=done, total=total)

    def close(self) -> None:
        with self._lock:
            if self._bar is not None:
                self._bar.stop()
                self._bar = None


@contextmanager
def rank_bar(enabled: bool | None = None) -> Iterator[RankBar | None]:
    """Install a :class:`RankBar` while the block runs, when stderr is a terminal (or when
    ``enabled`` says so)."""
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled:
        yield None
        return
    bar = RankBar()
    try:
        with reporting(bar):
            yield bar
    finally:
        bar.close()
