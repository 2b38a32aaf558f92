"""Read and write building blocks (``pipeaudit simulate --building-block FILE``).

JSON::

    {"name": "my-1f1b", "placement": "loop", "ranks": 4, "interval": 3,
     "durations": {"F": 1, "B": 2},
     "passes": [{"stage": 0, "kind": "F", "offset": 0}, ...,
                {"stage": 0, "kind": "B", "offset": 10, "microbatch": 0}]}

Only ``passes`` is required (a bare list of passes works too; a pass may also be written
``[stage, kind, offset]`` or ``[stage, kind, offset, microbatch]``). ``placement`` is ``"loop"``
(stage s on rank s % P, the default), ``"v"`` (rank r holds stages r and 2P-1-r) or a list
giving each stage's rank; ``ranks`` (P) defaults to one stage per rank for ``loop`` and two for
``v``; ``microbatch`` (default 0) numbers the microbatches of a block that holds several;
``durations`` are the pass lengths the offsets assume (default F=1, B=2, I=1, W=1);
``interval`` defaults to the busiest rank's work in the block, the tightest a collision-free
repeat can be.

CSV: one pass per line, ``stage,kind,offset[,microbatch]``; a header line naming these
columns, empty lines and lines starting with ``#`` are skipped. The other settings come from
the command line (``--placement``, ``-P``, ``--interval``).

Every problem is one :class:`ScheduleError` naming the file.
"""

from __future__ import annotations

import csv
import io
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from pipeaudit.errors import ScheduleError
from pipeaudit.schedules.blocks import DEFAULT_DURATIONS, BuildingBlock, Pass, check_block
from pipeaudit.schedules.model import loop_placement, v_placement


def load_block_file(path: str | Path, *, placement: str | None = None,
                    num_ranks: int | None = None, interval: float | None = None) -> BuildingBlock:
    """The block in ``path`` (JSON if it starts with ``{`` or ``[``, else CSV); the keyword
    arguments override the file's settings. The block is checked (:func:`check_block`)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScheduleError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ScheduleError(f"{path}: cannot read the building block ({exc.__class__.__name__}: {exc})") from None
    try:
        if text.lstrip().startswith(("{", "[")):
            meta, passes = _from_json(text)
        else:
            meta, passes = {}, _from_csv(text)
        block = _block(p, meta, passes, placement, num_ranks, interval)
        check_block(block)
    except ScheduleError as exc:
        raise ScheduleError(f"{path}: {exc}") from None
    return block


def _from_json(text: str) -> tuple[dict[str, Any], list[Pass]]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ScheduleError(f"invalid JSON: {exc}") from None
    meta = doc if isinstance(doc, dict) else {}
    raw = doc.get("passes") if isinstance(doc, dict) else doc
    if not isinstance(raw, list) or not raw:
        raise ScheduleError("a building block needs a non-empty 'passes' list")
    return meta, [_pass(item, i) for i, item in enumerate(raw)]


def _pass(item: Any, i: int) -> Pass:
    try:
        if isinstance(item, dict):
            stage, kind, offset = item["stage"], item["kind"], item["offset"]
            mb = item.get("microbatch", 0)
        elif isinstance(item, list) and len(item) in (3, 4):
            stage, kind, offset = item[0], item[1], item[2]
            mb = item[3] if len(item) == 4 else 0
        else:
            raise KeyError
        return Pass(_int(stage, "stage"), str(kind).strip().upper(), _num(offset, "offset"),
                    _int(mb, "microbatch"))
    except KeyError:
        raise ScheduleError(f"pass {i}: expected {{stage, kind, offset[, microbatch]}} or "
                            f"[stage, kind, offset(, microbatch)], got {item!r}") from None
    except ScheduleError as exc:
        raise ScheduleError(f"pass {i}: {exc}") from None


def _int(x: Any, what: str) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, str)):
        raise ScheduleError(f"{what} must be an integer, got {x!r}")
    try:
        return int(x)
    except ValueError:
        raise ScheduleError(f"{what} must be an integer, got {x!r}") from None


def _num(x: Any, what: str) -> float:
    if isinstance(x, bool):
        raise ScheduleError(f"{what} must be a number, got {x!r}")
    try:
        return float(x)
    except (TypeError, ValueError):
        raise ScheduleError(f"{what} must be a number, got {x!r}") from None


def _from_csv(text: str) -> list[Pass]:
    passes = []
    for line_no, row in enumerate(csv.reader(io.StringIO(text)), start=1):
        cells = [c.strip() for c in row]
        if not any(cells) or cells[0].startswith("#"):
            continue
        if cells[0].lower() == "stage":
            continue
        if len(cells) not in (3, 4):
            raise ScheduleError(f"line {line_no}: expected stage,kind,offset[,microbatch], got {row!r}")
        try:
            passes.append(_pass(cells, line_no))
        except ScheduleError as exc:
            raise ScheduleError(f"line {line_no}: {str(exc).split(': ', 1)[-1]}") from None
    if not passes:
        raise ScheduleError("no passes found (expected lines of stage,kind,offset[,microbatch])")
    return passes


def _block(path: Path, meta: dict[str, Any], passes: list[Pass], placement: str | None,
           num_ranks: int | None, interval: float | None) -> BuildingBlock:
    stages = 1 + max(p.stage for p in passes)
    where = placement if placement is not None else meta.get("placement", "loop")
    ranks = num_ranks if num_ranks is not None else meta.get("ranks")
    if isinstance(where, list):
        place = tuple(_int(r, "placement entry") for r in where)
        if len(place) != stages:
            raise ScheduleError(f"placement names {len(place)} stages, the passes use {stages}")
    elif where == "loop":
        P = _int(ranks, "ranks") if ranks is not None else stages
        if stages % P:
            raise ScheduleError(f"loop placement: {stages} stages do not divide over {P} ranks")
        place = loop_placement(P, stages // P)
    elif where == "v":
        P = _int(ranks, "ranks") if ranks is not None else stages // 2
        if stages != 2 * P:
            raise ScheduleError(f"V placement needs 2P = {2 * P} stages, the passes use {stages}")
        place = v_placement(P)
    else:
        raise ScheduleError(f"placement must be 'loop', 'v' or a list of ranks, got {where!r}")
    durations = dict(DEFAULT_DURATIONS)
    for kind, value in (meta.get("durations") or {}).items():
        durations[str(kind).upper()] = _num(value, f"duration of {kind}")
    T = interval if interval is not None else meta.get("interval")
    if T is None:
        work: dict[int, float] = defaultdict(float)
        for p in passes:
            work[place[p.stage] if p.stage < len(place) else 0] += durations.get(p.kind, 0.0)
        T = max(work.values())
    name = str(meta.get("name") or path.stem)
    return BuildingBlock(name, place, tuple(passes), _num(T, "interval"), durations)


def format_block_json(block: BuildingBlock) -> str:
    """The block as JSON, loadable by :func:`load_block_file`."""
    doc = {
        "name": block.name,
        "placement": list(block.placement),
        "interval": block.interval,
        "durations": {k: block.durations[k] for k in sorted({p.kind for p in block.passes},
                                                            key="FBIW".index)},
        "passes": [{"stage": p.stage, "kind": p.kind, "offset": p.offset,
                    **({"microbatch": p.microbatch} if block.microbatches > 1 else {})}
                   for p in block.passes],
    }
    return json.dumps(doc, indent=1)
