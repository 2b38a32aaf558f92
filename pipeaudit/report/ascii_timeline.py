"""Render labelled intervals per row as an aligned ASCII timeline.

Every row (a rank) is cut into equal-width time cells. An item takes the cells
its interval covers, the first ones showing its label ("F3", or "2F3" when a
rank holds several stages), the rest '-'; cells where nothing runs show '.'.
A cell shared by two items goes to the one covering more of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class Item:
    """One interval on a row."""

    row: int
    start: float
    end: float
    label: str


def render(items: Sequence[Item], rows: Sequence[int], *, width: int = 96,
           t0: float | None = None, t1: float | None = None, unit: str = "ms",
           scale: float = 1.0, row_name: str = "rank") -> str:
    """The timeline as text: one line per row plus a time axis.

    ``scale`` converts item times to ``unit`` for the axis labels.
    """
    if not items:
        return "(no actions)"
    lo = min(i.start for i in items) if t0 is None else t0
    hi = max(i.end for i in items) if t1 is None else t1
    span = max(hi - lo, 1e-12)
    cell = span / width
    name_w = max(len(f"{row_name} {r}") for r in rows) + 1
    lines = []
    for r in rows:
        cover = [0.0] * width
        chars = ["."] * width
        for it in sorted((i for i in items if i.row == r), key=lambda i: i.start):
            c0 = max(0, int((it.start - lo) / cell))
            c1 = min(width, max(c0 + 1, int(round((it.end - lo) / cell))))
            text = it.label if c1 - c0 >= len(it.label) else it.label[: c1 - c0]
            owned = []
            for c in range(c0, c1):
                a, b = lo + c * cell, lo + (c + 1) * cell
                share = max(0.0, min(b, it.end) - max(a, it.start))
                if share >= cover[c] or c1 - c0 == 1:
                    cover[c] = share
                    owned.append(c)
            for j, c in enumerate(owned):
                chars[c] = text[j] if j < len(text) else "-"
        lines.append(f"{row_name} {r}".ljust(name_w) + "|" + "".join(chars) + "|")
    left = f"{0:.2f} {unit}"
    right = f"{span * scale:.2f} {unit}"
    axis = " " * name_w + "|" + left + " " * max(1, width - len(left) - len(right)) + right + "|"
    lines.append(axis)
    return "\n".join(lines)
