"""Reading the Kineto traces the harness writes, as the tests look at them (plain JSON, no
pipeaudit code: the tests check the files themselves)."""

from __future__ import annotations

import collections
import gzip
import json
from pathlib import Path


def load(path: Path) -> dict:
    """The whole document of a ``.json.gz`` trace."""
    with gzip.open(path, "rt") as f:
        return json.load(f)


def spans(doc: dict | list[dict], prefix: str = "") -> list[dict]:
    """Complete events (ph X) whose name starts with ``prefix``, by start time; ``doc`` is a
    document or its ``traceEvents``."""
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    return sorted((e for e in events if e.get("ph") == "X"
                   and str(e.get("name", "")).startswith(prefix)), key=lambda e: e["ts"])


def inside(e: dict, outer: dict) -> bool:
    """``e`` lies within ``outer`` (1 ns of rounding allowed)."""
    return outer["ts"] <= e["ts"] and e["ts"] + e.get("dur", 0) <= outer["ts"] + outer["dur"] + 1e-3


def names(doc: dict) -> collections.Counter:
    """How often each complete event's name occurs."""
    return collections.Counter(e["name"] for e in doc["traceEvents"] if e.get("ph") == "X")
