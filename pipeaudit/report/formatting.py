"""Small number formatters shared by the text reporters."""

from __future__ import annotations


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
