"""Error types. Every failure pipeaudit reports to a user is one of these.

The CLI turns a :class:`PipeauditError` into one line on stderr and exit code 2;
anything else escaping is a bug.
"""

from __future__ import annotations

from pathlib import Path


class PipeauditError(Exception):
    """Base class of every error pipeaudit raises on purpose."""

    exit_code = 2


class TraceError(PipeauditError):
    """A trace file (or a set of them) cannot be used: names the file and the problem."""

    def __init__(self, path: str | Path | None, problem: str) -> None:
        self.path = str(path) if path is not None else None
        self.problem = problem
        super().__init__(f"{self.path}: {problem}" if self.path else problem)

    def __reduce__(self):  # picklable across worker processes
        return (type(self), (self.path, self.problem))


class ScheduleError(PipeauditError):
    """A schedule cannot be built or replayed (invalid P/M/v, unknown name, deadlock)."""


class ConfigError(PipeauditError):
    """Invalid options or configuration (thresholds, baselines, option combinations)."""
