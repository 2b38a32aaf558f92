"""Plain-text timelines of pipeline actions: one notation for ``simulate``, ``analyze`` and
``explain``.

Notation (docs/reading-the-report.md, docs/schedules.md):

* an action is labelled by its kind and microbatch, ``F3`` (forward of microbatch 3), ``B0``
  (full backward), ``I2`` (input gradient), ``W2`` (weight gradient); when a rank holds several
  stages (interleaved and V schedules) the label starts with the global stage, as torch names
  actions: ``2F3`` is stage 2's forward of microbatch 3;
* ``=`` continues the action on its left, computing; ``-`` continues it waiting (a cell of
  its span with no compute in it: the recv or the send it waits on); ``.`` is a cell outside
  every action;
* an action too narrow for its label shows its kind, and its whole label stands on a line
  under the rank's, in order (``render``); every microbatch number is on the page.

Two layouts share the notation. :func:`render_cells` (``simulate``) gives each time unit a
cell as wide as the longest label, so integer-time replays read exactly; :func:`render`
(``analyze``, ``explain``) scales measured times onto a fixed number of one-character cells and
writes each label into the first cells of its action.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

CONTINUE = "="
WAIT = "-"
IDLE = "."


@dataclass(frozen=True)
class Item:
    """One interval on a row."""

    row: int
    start: float
    end: float
    label: str
    #: the intervals inside ``start``..``end`` that compute; empty: all of it
    compute: tuple[tuple[float, float], ...] = ()


def action_label(kind: str, microbatch: int, stage: int | None = None) -> str:
    """``F3``, or ``2F3`` when ``stage`` is given (a rank holding several stages)."""
    return f"{'' if stage is None else stage}{kind}{microbatch}"


def legend(multi_stage: bool, waits: bool = False) -> str:
    """How to read the labels and the cells (``waits``: a timeline of measured times, whose
    cells may wait (:data:`WAIT`) and whose short actions have their labels underneath)."""
    if waits:
        text = (f"F3 = forward of microbatch 3 (B backward, I input, W weight gradient); "
                f"'{CONTINUE}' it computes, '{WAIT}' it waits, '{IDLE}' no action\n"
                "an action too short for its label shows its kind; the whole label stands on the "
                "line under the rank's")
    else:
        text = (f"F3 = forward of microbatch 3 (B backward, I input gradient, W weight gradient), "
                f"'{CONTINUE}' continues it, '{IDLE}' no compute")
    if multi_stage:
        text += "\nranks hold several stages: 2F3 is stage 2's F3"
    return text


# ----------------------------------------------------------------- scaled (measured times)


def render(items: Sequence[Item], rows: Sequence[int], *, width: int = 96,
           t0: float | None = None, t1: float | None = None, unit: str = "ms",
           scale: float = 1.0, row_name: str = "rank", marks=None) -> str:
    """The timeline as text: one line per row plus a time axis, ``width`` one-character
    cells between ``t0`` and ``t1``. An item takes the cells its interval covers, the first
    ones showing its label, the rest ``=``, or ``-`` where the item says what computes and the
    cell is mostly waiting; a cell shared by two items goes to the one covering more of it.
    An item too narrow for its label shows its first letters, and the whole label stands on a
    line under the row (:func:`label_lines`), as near its start as the labels before it allow.
    ``marks(row, name_width)`` may add lines right under each row (``explain``'s critical path). ``scale``
    converts item times to ``unit`` for the axis labels.
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
        chars = [IDLE] * width
        cut: list[tuple[int, str]] = []
        for it in sorted((i for i in items if i.row == r), key=lambda i: i.start):
            c0 = max(0, int((it.start - lo) / cell))
            c1 = min(width, max(c0 + 1, int(round((it.end - lo) / cell))))
            owned = []
            for c in range(c0, c1):
                a, b = lo + c * cell, lo + (c + 1) * cell
                share = max(0.0, min(b, it.end) - max(a, it.start))
                if share >= cover[c] or c1 - c0 == 1:
                    cover[c] = share
                    owned.append(c)
            text = it.label if len(owned) >= len(it.label) else _kind_part(it.label)[: max(1, len(owned))]
            if text != it.label:
                cut.append((owned[0] if owned else c0, it.label))
            for j, c in enumerate(owned):
                chars[c] = text[j] if j < len(text) else _fill(it, lo + c * cell, lo + (c + 1) * cell)
        lines.append(f"{row_name} {r}".ljust(name_w) + "|" + "".join(chars) + "|")
        if marks is not None:
            lines += marks(r, name_w)
        lines += [" " * name_w + "|" + line.ljust(width) + "|" for line in label_lines(cut, width)]
    left = f"{0:.2f} {unit}"
    right = f"{span * scale:.2f} {unit}"
    axis = " " * name_w + "|" + left + " " * max(1, width - len(left) - len(right)) + right + "|"
    lines.append(axis)
    return "\n".join(lines)


def _kind_part(label: str) -> str:
    """``F`` of ``F12``, ``2F`` of ``2F3``: what a cell too narrow for the label shows."""
    return label.rstrip("0123456789") or label


def label_lines(labels: Sequence[tuple[int, str]], width: int) -> list[str]:
    """Lines of ``(column, label)`` labels, in order: each label at its column or, where the
    label before it is in the way, one space after that label; a label that would pass
    ``width`` starts the next line."""
    lines: list[str] = []
    ends: list[int] = []
    for col, label in labels:
        for i, end in enumerate(ends):
            at = max(col, end + 1)
            if at + len(label) <= width:
                break
        else:
            lines.append("")
            ends.append(-1)
            i, at = len(lines) - 1, max(0, min(col, width - len(label)))
        lines[i] = lines[i].ljust(at) + label
        ends[i] = at + len(label)
    return lines


def _fill(it: Item, a: float, b: float) -> str:
    """``=`` for a cell ``a``..``b`` of ``it`` that computes at least half of its share of
    the cell, ``-`` for one mostly waiting."""
    if not it.compute:
        return CONTINUE
    share = max(0.0, min(b, it.end) - max(a, it.start))
    busy = sum(max(0.0, min(b, e) - max(a, s)) for s, e in it.compute)
    return CONTINUE if busy >= 0.5 * share else WAIT


# ------------------------------------------------------------- cells (simulated time units)


def _time_unit(times: Sequence[float], max_cells: int) -> tuple[float, bool]:
    """(unit, exact): the largest unit dividing every time, or span/max_cells."""
    positive = [t for t in times if t > 1e-12]
    if not positive:
        return 1.0, True
    span = max(positive)
    smallest = min(positive)
    for k in range(1, 65):
        unit = smallest / k
        if span / unit > max_cells + 1e-9:
            break
        if all(abs(t / unit - round(t / unit)) < 1e-6 for t in positive):
            return unit, True
    return _nice_at_least(span / max_cells), False


def _nice_at_least(x: float) -> float:
    """The smallest 1, 2, 2.5 or 5 times a power of ten that is >= x."""
    exp = math.floor(math.log10(x))
    for base in (1, 2, 2.5, 5, 10):
        cand = base * 10.0**exp
        if cand >= x * (1 - 1e-12):
            return cand
    return 10.0 ** (exp + 1)  # pragma: no cover


def render_cells(items: Sequence[Item], num_rows: int, *, max_cells: int = 160,
                 multi_stage: bool = False, row_name: str = "rank", line_width: int = 120) -> str:
    """Items (times from 0) on equal-width time cells: one row per rank, a time axis, the
    legend. The unit is the largest step that all starts and ends are multiples of, so nothing
    is rounded unless the step would need more than ``max_cells`` cells; then each cell shows
    what runs at its midpoint. A step wider than ``line_width`` columns is drawn in bands, one
    after the other, each with its own time axis."""
    times = [i.start for i in items] + [i.end for i in items]
    unit, exact = _time_unit(times, max_cells)
    span = max(times, default=0.0)
    ncells = max(1, math.ceil(span / unit - 1e-9))
    width = max([len(i.label) for i in items] + [1])
    grid = [[IDLE] * ncells for _ in range(num_rows)]
    for it in items:
        s, e = it.start / unit, it.end / unit
        if exact:
            first, last = round(s), round(e)
        else:  # a cell belongs to the action running at its midpoint
            first, last = math.ceil(s - 0.5), math.ceil(e - 0.5)
        if last <= first:
            continue
        row = grid[it.row]
        row[first] = it.label
        for c in range(first + 1, min(last, ncells)):
            row[c] = CONTINUE
    name_w = len(f"{row_name} {num_rows - 1}")
    per_band = max(1, (line_width - name_w - 3) // (width + 1))
    lines = []
    for b0 in range(0, ncells, per_band):
        if b0:
            lines.append("")
        for r in range(num_rows):
            cells = " ".join(c.ljust(width) if c not in (CONTINUE, IDLE) else c * width
                             for c in grid[r][b0:b0 + per_band])
            lines.append(f"{f'{row_name} {r}'.ljust(name_w)} | {cells}")
        lines.append(_axis(min(per_band, ncells - b0), width, unit, name_w, first=b0))
    note = (f"one cell = {unit:g} time unit{'' if unit == 1 else 's'}"
            + ("" if exact else " (sampled at cell midpoints)"))
    if ncells > per_band:
        note += f"; the step in {math.ceil(ncells / per_band)} bands of {per_band} cells"
    lines.append(f"{' ' * (name_w + 3)}{note}")
    lines.append(legend(multi_stage))
    return "\n".join(lines)


def _axis(ncells: int, width: int, unit: float, name_w: int, first: int = 0) -> str:
    """Time labels under the cells ``first`` .. ``first + ncells``, every ``step`` cells,
    never overlapping."""
    pitch = width + 1

    def text(c: int) -> str:
        return f"{(first + c) * unit:.6g}"

    step = 1
    for cand in (1, 2, 4, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 10**9):
        step = cand
        longest = max(len(text(c)) for c in range(0, ncells + 1, cand))
        if cand * pitch >= longest + 1:
            break
    chars = [" "] * (ncells * pitch + 12)
    for c in range(0, ncells + 1, step):
        label = text(c)
        pos = c * pitch
        chars[pos:pos + len(label)] = list(label)
    return f"{'t'.ljust(name_w)} | " + "".join(chars).rstrip()
