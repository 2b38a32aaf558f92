"""How metric values and their changes are written for people: 49.2%, 386.06 ms, +3.2 pts.

Shared by the gate's explanations and the reporters (neither imports the other for it).
"""

from __future__ import annotations


#: unit -> (divisor, decimals, suffix) of a plain number in that unit
_UNITS: dict[str, tuple[float, int, str]] = {
    "us": (1000, 2, " ms"), "bytes": (2**20, 1, " MiB"), "count": (1, 0, ""),
}


def _number(x: float, unit: str, sign: str) -> str:
    div, digits, suffix = _UNITS.get(unit, (1, 2, ""))
    return f"{x / div:{sign}.{digits}f}{suffix}"


def fmt_value(x: float | None, unit: str) -> str:
    """A metric value for people: 49.2%, 386.06 ms, 1.99, 9.3 MiB, 4."""
    if x is None:
        return "-"
    return f"{100 * x:.1f}%" if unit == "fraction" else _number(x, unit, "")


def fmt_change(x: float | None, mode: str, unit: str) -> str:
    """A change for people: +3.2 pts (fractions), +25.6% (relative), +0.95, +4."""
    if x is None:
        return "-"
    text = _fmt_change(x, mode, unit)
    return "+" + text[1:] if text.startswith("-") and not any(c in "123456789" for c in text) \
        else text


def _fmt_change(x: float, mode: str, unit: str) -> str:
    if x == float("inf"):
        return "+inf"
    if mode == "rel":
        return f"{100 * x:+.1f}%"
    if unit == "fraction":
        return f"{100 * x:+.1f} pts"
    return _number(x, unit, "+")
