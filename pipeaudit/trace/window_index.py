"""The window index of :func:`pipeaudit.profiler.trace_handler`: which trace file each rank
wrote for a profiled window (written by the handler, read by window discovery,
:mod:`pipeaudit.trace.windows`).

The traces keep torch's own names (``{worker}.{ns}.pt.trace.json[.gz]`` in the handler's
folder), so TensorBoard's profiler view reads them unchanged. Beside them, every rank writes
one small entry per window, ``pipeaudit/step_{N}/rank{r}.json`` (N: the profiler's
``step_num`` when the window was exported, the same on every rank of a job that steps
together), and the window's audit lands in the same folder as ``audit.json``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

INDEX_DIR = "pipeaudit"
AUDIT_FILE = "audit.json"
LOG_FILE = "audit.log"
_PREFIX = "step_"


@dataclass(frozen=True)
class Entry:
    """One rank's trace of one window."""

    rank: int
    world_size: int | None
    trace: Path
    step: int


def window_folder(dir_name: str | os.PathLike, step: int) -> Path:
    """``{dir_name}/pipeaudit/step_{step}``: the window's index entries and its audit.json."""
    return Path(dir_name) / INDEX_DIR / f"{_PREFIX}{step:08d}"


def step_of_folder(folder: Path) -> int | None:
    """The step of a window folder's name, or None when it is not one."""
    name = folder.name
    if name.startswith(_PREFIX) and name[len(_PREFIX):].isdigit():
        return int(name[len(_PREFIX):])
    return None


def write_entry(folder: Path, rank: int, world_size: int | None, trace_name: str,
                step: int) -> Path:
    """Write rank's entry atomically (a reader never sees half of it)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"rank{rank}.json"
    tmp = folder / f".rank{rank}.json.tmp"
    tmp.write_text(json.dumps({"rank": rank, "world_size": world_size, "trace": trace_name,
                               "step": step}))
    os.replace(tmp, path)
    return path


def read_entries(folder: Path) -> list[Entry]:
    """The entries present in a window folder (unreadable ones skipped), by rank."""
    out: list[Entry] = []
    try:
        names = os.listdir(folder)
    except OSError:
        return out
    for name in names:
        if not (name.startswith("rank") and name.endswith(".json")):
            continue
        try:
            d = json.loads((folder / name).read_text())
            trace = Path(d["trace"])
            if not trace.is_absolute():
                trace = folder.parent.parent / trace
            ws = d.get("world_size")
            out.append(Entry(rank=int(d["rank"]), world_size=int(ws) if ws else None,
                             trace=trace, step=int(d["step"])))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return sorted(out, key=lambda e: e.rank)


def window_folders(dir_name: str | os.PathLike) -> list[Path]:
    """Every window folder under ``dir_name``'s index, by step."""
    root = Path(dir_name) / INDEX_DIR
    try:
        subs = [root / n for n in os.listdir(root)]
    except OSError:
        return []
    subs = [p for p in subs if step_of_folder(p) is not None and p.is_dir()]
    return sorted(subs, key=lambda p: step_of_folder(p) or 0)
