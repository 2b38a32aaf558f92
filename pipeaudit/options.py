"""How to read one run's traces: one validated, frozen set of options for every entry point.

``pipeaudit.load``, ``gate.load_snapshot`` and every CLI command that reads a run take the
same :class:`LoadOptions` (the CLI declares the matching flags once, in
:mod:`pipeaudit.cli.runopts`). Validation happens when the options are made, before any
file is read, and the errors speak of the option names the caller used.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace
from typing import Any

from pipeaudit.errors import ConfigError, ScheduleError


class OptionError(ConfigError):
    """A load option with a value it cannot take: ``option`` (the field name) and ``reason``."""

    def __init__(self, option: str, reason: str) -> None:
        self.option = option
        self.reason = reason
        super().__init__(f"{option}: {reason}")


@dataclass(frozen=True)
class LoadOptions:
    """The options of reading and auditing one run.

    ``schedule``: the schedule the run ran (checked against the order); ``action_pattern``: a
    regex with named groups ``kind``, ``mb`` and optionally ``stage`` for other frameworks'
    spans; ``num_microbatches`` / ``num_steps``: state M or the number of steps for traces
    that show neither; ``layout``: e.g. ``"pp=4,dp=2"`` when the traces do not say which ranks
    form each pipeline replica; ``jobs``: ranks decoded at once on this machine (None: the
    cores); ``executor``: ``"local"``, ``"processes"`` or ``"dask://HOST:PORT"``;
    ``max_memory``: the decode's memory budget in bytes or text such as ``"4G"`` (None: half
    the available memory); ``allow_missing``: analyse a set of ranks with gaps;
    ``salvage``: read truncated or corrupt files for their complete events.
    """

    schedule: str | None = None
    action_pattern: str | None = None
    num_microbatches: int | None = None
    num_steps: int | None = None
    layout: str | None = None
    jobs: int | None = None
    executor: str | None = None
    max_memory: int | str | None = None
    allow_missing: bool = False
    salvage: bool = False

    def __post_init__(self) -> None:
        for name in ("num_microbatches", "num_steps", "jobs"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, int) and not isinstance(value, bool)
                                          and value >= 1):
                raise OptionError(name, f"must be an integer >= 1, got {value!r}")
        for name in ("allow_missing", "salvage"):
            if not isinstance(getattr(self, name), bool):
                raise OptionError(name, f"must be True or False, got {getattr(self, name)!r}")
        if self.schedule is not None:
            from pipeaudit.schedules import canonical_name

            try:
                canonical_name(self.schedule)
            except ScheduleError as exc:  # names the known schedules
                raise OptionError("schedule", str(exc)) from None
        if self.action_pattern is not None:
            try:
                re.compile(self.action_pattern)
            except re.error as exc:
                raise OptionError("action_pattern", f"{self.action_pattern!r} is not a valid "
                                  f"regex: {exc}") from None
        if self.layout is not None:
            from pipeaudit.timeline.layout import parse_layout

            try:
                parse_layout(self.layout)
            except ConfigError as exc:
                raise OptionError("layout", str(exc)) from None
        if self.executor is not None:
            from pipeaudit.trace.executor import parse_executor

            try:
                parse_executor(self.executor)
            except ConfigError:
                raise OptionError("executor", f"{self.executor!r} is not one of: local, "
                                  "processes, dask://HOST:PORT") from None
        if self.max_memory is not None:
            from pipeaudit.trace.options import parse_size

            try:
                object.__setattr__(self, "max_memory", parse_size(self.max_memory))  # type: ignore[arg-type]
            except ValueError as exc:
                raise OptionError("max_memory", str(exc)) from None

    def with_changes(self, **changes: Any) -> "LoadOptions":
        """A copy with some options changed (validated again)."""
        return replace(self, **changes)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The option names, in declaration order."""
        return tuple(f.name for f in fields(cls))
