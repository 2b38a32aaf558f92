"""One window's audit, in a process of its own started by the worker (:mod:`.worker`):

    python -m pipeaudit.during.auditor '{"folder": ..., "files": [...], "level": "low", ...}'

It sets its priority first (:mod:`.priority`), audits the files, logs the scalars to
TensorBoard and MLflow, and writes the window's ``audit.json``: the audit, or ``"error"``
with the traceback in ``audit.log`` (its stderr). It exits 0; the worker ends it at the bound.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any


def audit(spec: dict[str, Any]) -> int:
    """Audit the window of ``spec`` and write its ``audit.json``."""
    import resource

    from pipeaudit.during.audit_window import WindowAudit, audit_window, write_audit
    from pipeaudit.during.index import AUDIT_FILE
    from pipeaudit.during.sinks import log_from_audit

    started = time.monotonic()
    folder = Path(spec["folder"])
    step = int(spec["step"])
    label = f"step {step}"
    missing = spec.get("missing") or []
    try:
        if not spec["files"]:
            raise RuntimeError("no rank wrote a trace for this window")
        result = audit_window(spec["files"], label=label, step=step,
                              world_size=spec.get("world_size"), missing=missing,
                              waited_s=spec.get("waited_s") if missing else None,
                              baseline=spec.get("gate"))
        log_from_audit(spec, result, step)
    except Exception as exc:  # written down, never raised into anything
        _log(f"audit of {label} failed: {type(exc).__name__}: {exc}")
        _log(traceback.format_exc())
        doc = {"schema_version": 1, "tool": "pipeaudit", "kind": "window-error",
               "window": {"label": label, "step": step, "files": spec["files"],
                          "world_size": spec.get("world_size"), "ranks_missing": missing},
               "error": f"{type(exc).__name__}: {exc}"}
        result = WindowAudit(doc=doc, scalars={}, notes=[])
    for note in result.notes:
        _log(f"{label}: note: {note}")
    result.doc["notes"] = result.notes
    ru = resource.getrusage(resource.RUSAGE_SELF)
    result.doc.setdefault("window", {})["cost"] = {
        "wall_s": round(time.monotonic() - started, 3),
        "cpu_s": round(ru.ru_utime + ru.ru_stime, 3), **(spec.get("cost") or {})}
    write_audit(folder / AUDIT_FILE, result)
    return 0


def _log(msg: str) -> None:
    print(f"pipeaudit: {msg}", file=sys.stderr, flush=True)


def main(argv: list[str]) -> int:
    try:
        spec = json.loads(argv[0])
        from pipeaudit.during.priority import lower_priority

        lower_priority(spec.get("level", "normal"))
        return audit(spec)
    except Exception:  # the last net: never a traceback anywhere but audit.log
        _log(traceback.format_exc())
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
