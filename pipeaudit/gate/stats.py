"""Robust summaries of per-step values: the median and the spread the gate allows for.

The spread is the median absolute deviation scaled by 1.4826, which estimates
the standard deviation of normally distributed values while ignoring outliers:
one slow step moves neither the median nor the MAD of five steps much.
"""

from __future__ import annotations

from statistics import median as _median
from typing import Iterable

MAD_SCALE = 1.4826  # MAD * 1.4826 estimates sigma for normal data


def values(xs: Iterable[float | int | None]) -> list[float]:
    """The known values of a series, as floats."""
    return [float(x) for x in xs if x is not None]


def median(xs: Iterable[float | int | None]) -> float | None:
    """Median of the known values (None when there are none)."""
    v = values(xs)
    return float(_median(v)) if v else None


def spread(xs: Iterable[float | int | None]) -> float:
    """Scaled MAD of the known values (0 for fewer than two values)."""
    v = values(xs)
    if len(v) < 2:
        return 0.0
    m = _median(v)
    return MAD_SCALE * float(_median(abs(x - m) for x in v))


def relative_change(base: float | None, now: float | None) -> float | None:
    """(now - base) / base; None when either is unknown or base is 0."""
    if base is None or now is None or base == 0:
        return None
    return (now - base) / abs(base)
