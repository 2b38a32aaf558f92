"""JSON reporter: a result as one JSON document (``schema_version`` included)."""

from __future__ import annotations

from typing import Any

from pipeaudit.jsontext import to_json

__all__ = ["render_json", "to_json"]


def render_json(result: Any, **_: Any) -> str:
    """The JSON document of a result, with a final newline."""
    return to_json(result) + "\n"
