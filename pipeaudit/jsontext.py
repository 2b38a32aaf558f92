"""JSON text of result documents: pretty, with NaN and infinities as null."""

from __future__ import annotations

import math
from typing import Any

import msgspec


def _clean(x: Any) -> Any:
    if isinstance(x, float):
        return None if math.isnan(x) or math.isinf(x) else x
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


def to_json(doc: Any) -> str:
    """Pretty JSON text of a result (anything with ``to_dict()``) or a dict; NaN/inf become
    null."""
    d = doc.to_dict() if hasattr(doc, "to_dict") else doc
    return msgspec.json.format(msgspec.json.encode(_clean(d)), indent=2).decode()
