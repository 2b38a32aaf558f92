"""Plain-text timeline of a replay: one row per rank, equal-width time cells.

Each cell covers one time unit; it shows the action that starts in it (``F3``, ``B0``, ``I2``,
``W2``; with several chunks per rank a letter names the chunk: ``F3a`` is chunk 0, ``F3b``
chunk 1), ``=`` while that action continues, and ``.`` when the rank is idle. The unit is the
largest step that all starts and ends are multiples of, so nothing is rounded unless the step
would need more than ``max_cells`` cells; then each cell shows what runs at its midpoint.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pipeaudit.schedules.replay import ReplayResult

_CHUNK_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def _time_unit(times: Sequence[float], max_cells: int) -> tuple[float, bool]:
    """(unit, exact): the largest unit dividing every time, or makespan/max_cells."""
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


def _label(action, chunk_of_stage: dict[int, int], chunks: int) -> str:
    text = f"{action.kind}{action.microbatch}"
    if chunks > 1:
        text += _CHUNK_LETTERS[chunk_of_stage[action.stage] % len(_CHUNK_LETTERS)]
    return text


def render_timeline(result: ReplayResult, placement: Sequence[int], max_cells: int = 160) -> str:
    """The replay as aligned text: one row per rank plus a time axis."""
    num_ranks = result.num_ranks
    chunks = max(1, len(placement) // max(1, num_ranks))
    seen: dict[int, int] = {}
    chunk_of_stage: dict[int, int] = {}
    for s, r in enumerate(placement):
        chunk_of_stage[s] = seen.get(r, 0)
        seen[r] = chunk_of_stage[s] + 1
    t0 = result.window_start
    times = [a.start - t0 for a in result.actions] + [a.end - t0 for a in result.actions]
    unit, exact = _time_unit(times, max_cells)
    ncells = max(1, math.ceil(result.makespan / unit - 1e-9))
    labels = {id(a): _label(a.action, chunk_of_stage, chunks) for a in result.actions}
    width = max([len(x) for x in labels.values()] + [1])
    grid = [["." * 1] * ncells for _ in range(num_ranks)]
    for a in result.actions:
        s = (a.start - t0) / unit
        e = (a.end - t0) / unit
        if exact:
            first, last = round(s), round(e)
        else:  # a cell belongs to the action running at its midpoint
            first, last = math.ceil(s - 0.5), math.ceil(e - 0.5)
        if last <= first:
            continue
        row = grid[a.rank]
        row[first] = labels[id(a)]
        for c in range(first + 1, min(last, ncells)):
            row[c] = "="
    name_w = len(f"rank {num_ranks - 1}")
    lines = []
    for r in range(num_ranks):
        cells = " ".join(c.ljust(width) if c not in ("=", ".") else c * width for c in grid[r])
        lines.append(f"{f'rank {r}'.ljust(name_w)} | {cells}")
    lines.append(_axis(ncells, width, unit, name_w))
    note = f"one cell = {unit:g} time unit{'' if unit == 1 else 's'}" + ("" if exact else " (sampled at cell midpoints)")
    lines.append(f"{' ' * name_w}   {note}; '=' continues the action on its left, '.' is idle")
    if chunks > 1:
        lines.append(f"{' ' * name_w}   letters name the chunk (a = first stage of the rank, b = second, ...)")
    return "\n".join(lines)


def _axis(ncells: int, width: int, unit: float, name_w: int) -> str:
    """Time labels under the cells, every ``step`` cells, never overlapping."""
    pitch = width + 1

    def text(c: int) -> str:
        return f"{c * unit:.6g}"

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
