"""Step progress on stderr, only when stderr is a terminal. Torch-free (rich)."""

from __future__ import annotations

import sys


class Progress:
    """A rich progress bar of completed training steps (warm-up included).

    ``enabled=None`` shows it only when stderr is a TTY; otherwise every method
    is a no-op, so logs and CI output stay clean.
    """

    def __init__(self, total_steps: int, enabled: bool | None = None) -> None:
        if enabled is None:
            enabled = sys.stderr.isatty()
        self._bar = None
        self._done = 0
        if enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as RichProgress

            self._bar = RichProgress(
                TextColumn("pipeaudit profile"), BarColumn(), MofNCompleteColumn(),
                TextColumn("steps"), TimeElapsedColumn(),
                console=Console(stderr=True), transient=True,
            )
            self._task = self._bar.add_task("steps", total=total_steps)
            self._bar.start()

    def update(self, done: int) -> None:
        if self._bar is not None and done != self._done:
            self._done = done
            self._bar.update(self._task, completed=done)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
