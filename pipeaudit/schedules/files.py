"""Read and write user schedules: per-rank action lists as CSV or JSON.

CSV (torch's ``_dump_csv`` "compute_only" layout): one line per rank, in rank order, cells
like ``0F0``, ``1B3``, ``0I2``, ``0W2``. Empty cells (torch's idle slots), ``PP:`` prefixes,
communication/FSDP cells (``1SEND_F0``, ``0UNSHARD``) are ignored, ``(0F3;3B1)OVERLAP_F_B`` is an
overlapped pair: ``0F3`` then ``3B1`` run as one unit, both outputs sent after ``3B1`` (as torch
runs it). Lines starting with ``#`` are comments. A first cell ``rank N`` is allowed.

JSON: ``{"name": ..., "num_microbatches": M, "placement": [...], "ranks": [[...], ...]}``;
only ``ranks`` is required (a bare list of lists works too).

Placement (stage -> rank) and M are inferred from the actions and then checked: every stage on
one rank, every rank holding the same number of stages, every (stage, microbatch) with one F,
one B or one I+W pair, and an order that does not deadlock.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections import defaultdict
from pathlib import Path

from pipeaudit.actions import Action
from pipeaudit.errors import ScheduleError
from pipeaudit.outfiles import write_text_atomic
from pipeaudit.schedules.model import Schedule, as_orders
from pipeaudit.schedules.replay import replay
from pipeaudit.schedules.torchnames import parse_action_name

_RANK_LABEL = re.compile(r"^rank\s*(\d+)\s*:?$", re.IGNORECASE)


def _fail(path: str | Path, problem: str) -> ScheduleError:
    return ScheduleError(f"{path}: {problem}")


def load_schedule_file(path: str | Path) -> Schedule:
    """Load a user schedule from CSV or JSON (by content: JSON if it starts with ``{``/``[``).

    Raises :class:`ScheduleError` naming the file and the problem.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise _fail(path, "no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise _fail(path, f"cannot read schedule file ({exc.__class__.__name__}: {exc})") from None
    stripped = text.lstrip()
    meta: dict = {}
    if stripped.startswith(("{", "[")):
        rows, meta = _rows_from_json(path, stripped)
    else:
        rows = _rows_from_csv(path, text)
    orders: list[list[Action]] = []
    pairs: list[tuple[Action, Action]] = []
    for r, cells in enumerate(rows):
        acts: list[Action] = []
        for cell in cells:
            try:
                parsed = parse_action_name(cell)
            except ScheduleError as exc:
                raise _fail(path, f"rank {r}: {exc}") from None
            if _is_pair(cell, parsed):
                pairs.append((parsed[0], parsed[1]))
            acts += parsed
        orders.append(acts)
    return _schedule_from_orders(path, orders, meta, pairs)


def _is_pair(cell: str, parsed: list[Action]) -> bool:
    """An ``OVERLAP_F_B`` cell naming one forward and one backward (full or input-gradient)."""
    return (cell.strip().endswith("OVERLAP_F_B") and len(parsed) == 2
            and parsed[0].kind == "F" and parsed[1].kind in ("B", "I"))


def _rows_from_csv(path: str | Path, text: str) -> list[list[str]]:
    rows: list[list[str]] = []
    for line_no, row in enumerate(csv.reader(io.StringIO(text)), start=1):
        cells = [c.strip() for c in row]
        if not any(cells) or cells[0].startswith("#"):
            continue
        m = _RANK_LABEL.match(cells[0])
        if m:
            if int(m.group(1)) != len(rows):
                raise _fail(path, f"line {line_no}: labelled rank {m.group(1)}, expected rank "
                                  f"{len(rows)} (one line per rank, in rank order)")
            cells = cells[1:]
        rows.append([c for c in cells if c])
    if not rows:
        raise _fail(path, "no ranks found (expected one line of actions per rank, e.g. 0F0,0F1,0B0,0B1)")
    return rows


def _rows_from_json(path: str | Path, text: str) -> tuple[list[list[str]], dict]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _fail(path, f"invalid JSON: {exc}") from None
    meta: dict = {}
    if isinstance(doc, dict):
        meta = doc
        ranks = doc.get("ranks", doc.get("orders"))
        if ranks is None:
            raise _fail(path, "JSON schedule needs a 'ranks' list (one list of actions per rank)")
    else:
        ranks = doc
    if isinstance(ranks, dict):
        try:
            ranks = [ranks[k] for k in sorted(ranks, key=int)]
        except (TypeError, ValueError):
            raise _fail(path, "'ranks' keys must be rank numbers") from None
    if not isinstance(ranks, list) or not ranks or not all(isinstance(r, list) for r in ranks):
        raise _fail(path, "'ranks' must be a non-empty list of lists of actions")
    for r, row in enumerate(ranks):
        for cell in row:
            if not isinstance(cell, str):
                raise _fail(path, f"rank {r}: actions must be strings like '0F0', got {cell!r}")
    return [[c for c in row if c.strip()] for row in ranks], meta


def _schedule_from_orders(path: str | Path, orders: list[list[Action]], meta: dict,
                          pairs: list[tuple[Action, Action]]) -> Schedule:
    num_ranks = len(orders)
    stage_rank: dict[int, int] = {}
    for r, order in enumerate(orders):
        for a in order:
            prev = stage_rank.setdefault(a.stage, r)
            if prev != r:
                raise _fail(path, f"stage {a.stage} appears on rank {prev} and on rank {r}")
    if not stage_rank:
        raise _fail(path, "no compute actions (F/B/I/W) found")
    num_stages = max(stage_rank) + 1
    missing = [s for s in range(num_stages) if s not in stage_rank]
    if missing:
        raise _fail(path, f"stages {missing} have no actions (stages must be numbered 0..S-1)")
    placement = tuple(stage_rank[s] for s in range(num_stages))
    if "placement" in meta and list(meta["placement"]) != list(placement):
        raise _fail(path, f"'placement' {meta['placement']} disagrees with the actions' ranks "
                          f"{list(placement)}")
    per_rank = [placement.count(r) for r in range(num_ranks)]
    if len(set(per_rank)) != 1 or per_rank[0] == 0:
        raise _fail(path, f"every rank must hold the same number of stages; stages per rank: {per_rank}")
    chunks = per_rank[0]
    num_mb = max(a.microbatch for o in orders for a in o) + 1
    if "num_microbatches" in meta and meta["num_microbatches"] != num_mb:
        raise _fail(path, f"'num_microbatches' is {meta['num_microbatches']} but actions use "
                          f"microbatches 0..{num_mb - 1}")
    _check_complete(path, orders, num_stages, num_mb)
    try:
        replay(orders, placement, lambda rank, action: 1.0, pairs=pairs)
    except ScheduleError as exc:
        raise _fail(path, str(exc)) from None
    name = str(meta.get("name") or f"file:{Path(path).name}")
    return Schedule(
        name=name,
        num_ranks=num_ranks,
        num_microbatches=num_mb,
        chunks=chunks,
        placement=placement,
        orders=as_orders(orders),
        split_backward=any(a.kind in ("I", "W") for o in orders for a in o),
        pairs=frozenset(pairs),
    )


def _check_complete(path: str | Path, orders: list[list[Action]], num_stages: int, num_mb: int) -> None:
    count: dict[tuple[int, str, int], int] = defaultdict(int)
    for order in orders:
        for a in order:
            count[(a.stage, a.kind, a.microbatch)] += 1
    for key, n in count.items():
        if n > 1:
            s, k, m = key
            raise _fail(path, f"{s}{k}{m} appears {n} times")
    for s in range(num_stages):
        for m in range(num_mb):
            f, b, i, w = (count.get((s, k, m), 0) for k in "FBIW")
            if not f:
                raise _fail(path, f"{s}F{m} is missing (every stage runs every microbatch forward)")
            if b + i != 1:
                raise _fail(path, f"stage {s} microbatch {m} needs exactly one of {s}B{m} or {s}I{m}")
            if i != w:
                raise _fail(path, f"{s}I{m} and {s}W{m} must come together (split backward)")


def _cells(schedule: Schedule, order: tuple[Action, ...]) -> list[str]:
    """One rank's actions as cells; an overlapped pair is one ``(F;B)OVERLAP_F_B`` cell."""
    cells: list[str] = []
    i = 0
    while i < len(order):
        a = order[i]
        if i + 1 < len(order) and (a, order[i + 1]) in schedule.pairs:
            cells.append(f"({a};{order[i + 1]})OVERLAP_F_B")
            i += 2
        else:
            cells.append(str(a))
            i += 1
    return cells


def format_schedule_csv(schedule: Schedule) -> str:
    """The schedule as CSV, one line per rank (loadable by torch's ``_load_csv`` too)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    for order in schedule.orders:
        writer.writerow(_cells(schedule, order))
    return buf.getvalue()


def format_schedule_json(schedule: Schedule) -> str:
    """The schedule as JSON with name, M, placement and ranks."""
    doc = {
        "name": schedule.name,
        "num_microbatches": schedule.num_microbatches,
        "placement": list(schedule.placement),
        "ranks": [_cells(schedule, order) for order in schedule.orders],
    }
    return json.dumps(doc, indent=1)


def save_schedule_file(schedule: Schedule, path: str | Path) -> None:
    """Write ``schedule`` as JSON (``.json``) or CSV (anything else)."""
    p = Path(path)
    text = format_schedule_json(schedule) if p.suffix.lower() == ".json" else format_schedule_csv(schedule)
    write_text_atomic(p, text, what="the schedule")
