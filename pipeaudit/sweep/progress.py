"""Sweep progress on stderr: a rich bar over the runs on a terminal, one line per run otherwise."""

from __future__ import annotations

import sys
from typing import TextIO

from pipeaudit.sweep.grid import GridPoint
from pipeaudit.sweep.results import SweepRecord
from pipeaudit.sweep.runner import SweepObserver


def _describe(record: SweepRecord, reused: bool) -> str:
    if reused:
        return "ok (kept from the previous sweep, --resume)"
    if record.status == "ok":
        return f"ok ({record.wall_s:.1f} s)" if record.wall_s is not None else "ok"
    return f"{record.status}: {record.reason}"


class SweepProgress(SweepObserver):
    """``enabled=None``: a bar when ``stream`` is a TTY, else plain lines (``quiet`` drops them)."""

    def __init__(self, stream: TextIO | None = None, enabled: bool | None = None,
                 quiet: bool = False) -> None:
        self._stream = stream or sys.stderr
        self._bar_on = self._stream.isatty() if enabled is None else enabled
        self._quiet = quiet
        self._bar = None
        self._total = 0

    def start(self, total: int) -> None:
        self._total = total
        if self._bar_on:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress

            self._bar = Progress(TextColumn("pipeaudit sweep"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("runs  {task.description}"), TimeElapsedColumn(),
                                 console=Console(file=self._stream), transient=True)
            self._task = self._bar.add_task("", total=total)
            self._bar.start()

    def begin(self, index: int, point: GridPoint) -> None:
        if self._bar is not None:
            self._bar.update(self._task, description=point.key)

    def done(self, index: int, record: SweepRecord, reused: bool) -> None:
        line = f"[{index + 1}/{self._total}] {record.key}: {_describe(record, reused)}"
        if self._bar is not None:
            self._bar.advance(self._task)
            if record.status == "failed":
                self._bar.console.print(line, markup=False, highlight=False)
        elif not self._quiet:
            print(line, file=self._stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
