"""What a trace file's *name* tells: its rank (a fallback only), and a natural sort order.

Recognised rank spellings (case-insensitive, the last one in the name wins):
``rank0_trace.json.gz`` (torchtitan), ``a100_ddp_ws2_rank0.json.gz``, ``trace_8_rank_1.json``,
``rank-3.json``. The word must start the name or follow a non-letter, so ``frank1`` and
``cranky2`` do not count, and ``no_rank.json`` has no rank.
"""

from __future__ import annotations

import re
from pathlib import Path

_RANK_RE = re.compile(r"(?:^|[^a-z])rank[_-]?(\d+)(?![0-9])", re.IGNORECASE)
_DIGITS = re.compile(r"(\d+)")

#: File name endings that may hold a trace when a directory is scanned.
TRACE_SUFFIXES: tuple[str, ...] = (".json", ".json.gz", ".json.gzip")

#: File names in a run directory that are never traces.
NOT_TRACES: frozenset[str] = frozenset({"manifest.json"})


def rank_from_name(path: str | Path) -> int | None:
    """The rank written in the file name, or None."""
    matches = _RANK_RE.findall(Path(path).name)
    return int(matches[-1]) if matches else None


def natural_key(path: str | Path) -> tuple:
    """Sort key that puts ``rank2`` before ``rank10``."""
    parts = _DIGITS.split(str(path))
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in parts)


def has_trace_suffix(name: str) -> bool:
    low = name.lower()
    return low.endswith(TRACE_SUFFIXES) and low not in NOT_TRACES
