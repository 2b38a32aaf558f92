"""JSON reporter: the audit result as one JSON document (``schema_version`` included)."""

from __future__ import annotations

import math
from typing import Any

import msgspec

from pipeaudit.audit.result import AuditResult


def _clean(x: Any) -> Any:
    if isinstance(x, float):
        return None if math.isnan(x) or math.isinf(x) else x
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


def to_json(doc: AuditResult | dict[str, Any]) -> str:
    """Pretty JSON text of an audit result (or any result dict); NaN/inf become null."""
    d = doc.to_dict() if isinstance(doc, AuditResult) else doc
    return msgspec.json.format(msgspec.json.encode(_clean(d)), indent=2).decode()
