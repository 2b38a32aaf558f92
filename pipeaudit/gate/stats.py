"""Robust summaries of per-step values: the median and the noise the gate allows for.

The spread is the median absolute deviation scaled by 1.4826, which estimates
the standard deviation of normally distributed values while ignoring outliers:
one slow step moves neither the median nor the MAD of five steps much. The median of n
such values varies by about 1.2533 spread / sqrt(n) (sqrt(pi/2)), so the difference of the
run's median and the baseline's varies by 1.2533 spread sqrt(1/n_base + 1/n_run): the
noise band is ``noise_k`` times that, and it narrows with more steps.
"""

from __future__ import annotations

import math
from statistics import median as _median
from typing import Iterable

MAD_SCALE = 1.4826  # MAD * 1.4826 estimates sigma for normal data
MEDIAN_SE = math.sqrt(math.pi / 2)  # the median of n normal values varies sigma * 1.2533 / sqrt(n)


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


def median_noise(spread_: float, k: float, n_base: int, n_run: int) -> float:
    """``k`` standard errors of (median of ``n_run`` steps - median of ``n_base`` steps) for
    steps that vary by ``spread_``."""
    if n_base < 1 or n_run < 1:
        return 0.0
    return k * MEDIAN_SE * spread_ * math.sqrt(1.0 / n_base + 1.0 / n_run)


def steps_to_gate(noise: float, threshold: float, n_base: int, n_run: int) -> int | None:
    """The steps a baseline and a run each need for the noise band ``noise`` (measured with
    ``n_base`` and ``n_run`` steps) to narrow to ``threshold``; None when no count does (a
    threshold of 0 with any noise)."""
    if threshold <= 0 or n_base < 1 or n_run < 1:
        return None
    per_step = noise / math.sqrt(1.0 / n_base + 1.0 / n_run)  # the band at one step each side
    return max(2, math.ceil(2 * (per_step / threshold) ** 2))
