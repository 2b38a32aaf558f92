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
