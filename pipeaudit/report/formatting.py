"""Small number formatters shared by the text reporters."""

from __future__ import annotations

import os


def pct(x: float | None, digits: int = 1) -> str:
    """A fraction as a percentage, '-' when unknown."""
    return "-" if x is None else f"{100 * x:.{digits}f}%"


def ms(us: float | None) -> str:
    """Microseconds as milliseconds."""
    return "-" if us is None else f"{us / 1000:.2f}"


def mib(b: int | None) -> str:
    """Bytes as MiB."""
    return "-" if b is None else f"{b / 2**20:.1f}"


def num(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def inputs_line(inputs: list[str], most: int = 4) -> str:
    """The trace files a report read, short: ``DIR/ (4 traces: rank0.json.gz ...
    rank3.json.gz)`` when they share a directory (both names when there are two), else the
    first ``most`` paths and how many more."""
    parents = {os.path.dirname(p) for p in inputs}
    if len(inputs) > 1 and len(parents) == 1 and "" not in parents:
        names = [os.path.basename(p) for p in inputs]
        shown = ", ".join(names) if len(names) == 2 else f"{names[0]} ... {names[-1]}"
        return f"{os.path.join(parents.pop(), '')} ({len(names)} traces: {shown})"
    return ", ".join(inputs[:most]) + (f" (+{len(inputs) - most} more)" if len(inputs) > most else "")


def with_unit(x: float | None, unit: str | None) -> str:
    """A finding's value in its unit: 52.4%, 1.99x, 82.07 ms, 4 (plain when the unit is unknown)."""
    if x is None or unit is None:
        return num(x)
    from pipeaudit.values import fmt_value

    return fmt_value(x, unit) + ("x" if unit == "ratio" else "")


def finding_where(f, sep: str = ", ", one_process: bool = False) -> str:
    """``rank 1, stage 1``: where a finding is ("" for a run-wide one); ``stage 1`` alone in
    a run where one process drove every stage (its ranks are the stages')."""
    parts = (f"rank {f.rank}" if f.rank is not None and not (one_process and f.stage is not None)
             else "", f"stage {f.stage}" if f.stage is not None else "")
    return sep.join(x for x in parts if x)


def finding_values(f) -> str:
    """`` (measured 52.4%, expected 27.3%)``, or "" when the finding has no values."""
    if f.measured is None or f.expected is None:
        return ""
    unit = getattr(f, "unit", None)
    return f" (measured {with_unit(f.measured, unit)}, expected {with_unit(f.expected, unit)})"
