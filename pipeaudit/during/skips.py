"""Windows the handler's worker recorded as skipped: an ``audit.json`` of kind
``window-skipped`` in the window's folder, with the reason (:mod:`.worker`)."""

from __future__ import annotations

import json
from pathlib import Path

from pipeaudit.during.index import AUDIT_FILE, step_of_folder

SKIPPED = "window-skipped"


def skipped_reason(folder: Path) -> str | None:
    """Why the worker skipped the window of the handler's window folder ``folder``; None when
    it is not such a folder or the window was not skipped."""
    if step_of_folder(folder) is None:
        return None
    try:
        doc = json.loads((folder / AUDIT_FILE).read_text())
    except (OSError, ValueError):
        return None
    if isinstance(doc, dict) and doc.get("kind") == SKIPPED:
        return str(doc.get("skipped") or "skipped")
    return None
