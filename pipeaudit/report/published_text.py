"""How every reporter words a source's published bubble figure next to the per-step theory.

Takes the JSON form (``Published.to_dict()``, ``AuditResult.bubble.published``) so that the
audit, ``simulate`` and ``sweep`` reporters share one wording.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeaudit.report.formatting import pct


NO_PUBLISHED = "published: the sources state no bubble formula for this schedule"


def published_value(pub: Mapping[str, Any] | None, digits: int = 1) -> str:
    """The published figure as a fraction of the step, '-' when there is none."""
    return "-" if not pub or pub.get("value") is None else pct(pub["value"], digits)


def published_headline(pub: Mapping[str, Any], digits: int = 1) -> str:
    """``(PP/2-1)(F&B+B-3W) = 3 (bubble time per rank) = 11.1% of the step, by <source>``."""
    bt = pub.get("bubble_time")
    stated = pub.get("stated_as", "")
    unit = f" {pub['time_unit']}" if pub.get("time_unit") else ""
    given = (f" = {bt:.6g}{unit} ({stated})" if bt is not None and stated.startswith("bubble time")
             else "")
    value = published_value(pub, digits)
    ratio = pub.get("ratio")
    ratio_text = f", ratio to compute {ratio:.3g}" if ratio is not None else ""
    return (f"{pub['formula']}{given} = {value} of the step{ratio_text}; "
            f"source: {pub['source']}")


def published_lines(pub: Mapping[str, Any] | None, digits: int = 1) -> list[str]:
    """Headline, assumptions (and whether these durations meet them), and why the published
    figure and the per-step theory agree or differ."""
    if not pub:
        return []
    met = "met" if pub.get("holds") else "NOT met by these durations"
    return [f"published: {published_headline(pub, digits)}",
            f"  assumptions ({met}): {pub['assumptions']}",
            f"  against the per-step theory: {pub['differs']}"]
