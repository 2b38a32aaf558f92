"""Audit one window's traces and write its ``audit.json``.

``audit.json`` is a baseline document (``pipeaudit baseline``'s: ``schema_version``, config,
per-step ``series`` and the full ``analyze --format json`` result under ``audit``), so a
window can be the ``--baseline`` of ``pipeaudit gate`` (a window with no pipeline step:
``"kind": "window"`` and ``audit`` only), with three more keys: ``window`` (which
files, which ranks arrived, which did not), ``scalars`` (:mod:`.scalars`) and ``notes``; with a
gate, ``gate`` holds the gate's JSON result.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from pipeaudit.during.scalars import scalars_of


@dataclass
class WindowAudit:
    """One audited window: the document written as audit.json and what the gate said."""

    doc: dict[str, Any]
    scalars: dict[str, float]
    notes: list[str]
    gate: Any = None  #: pipeaudit.gate.GateResult when a baseline was given
    failed_checks: list[Any] = field(default_factory=list)

    @property
    def regressed(self) -> bool:
        return bool(self.failed_checks)


def audit_window(files: Sequence[str | os.PathLike], *, label: str, step: int | None = None,
                 world_size: int | None = None, missing: Sequence[int] = (),
                 waited_s: float | None = None, baseline: str | None = None,
                 thresholds: Any = None, options: Any = None,
                 allow_config_change: bool = False) -> WindowAudit:
    """Audit ``files`` (one window, one file per rank present). ``missing``: ranks of the world
    size whose file did not arrive (``waited_s``: how long for); ``baseline``: a baseline
    document to gate the window against, with ``thresholds`` (default: the gate's; their
    budgets are checked without a baseline too); ``options``: the
    :class:`~pipeaudit.options.LoadOptions` to read with (a command's flags).

    Raises what :func:`pipeaudit.load` raises for unreadable traces."""
    import msgspec

    from pipeaudit import SCHEMA_VERSION
    from pipeaudit.api import load
    from pipeaudit.gate.snapshot import baseline_json, snapshot_from_run

    notes: list[str] = []
    if missing:
        waited = f" after waiting {waited_s:.0f} s" if waited_s is not None else ""
        which = f"rank{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))}"
        notes.append(f"{which} of world size {world_size} wrote no trace for this "
                     f"window{waited}: audited the ranks that arrived")
    if options is None:
        run = load([str(f) for f in files], allow_missing=bool(missing))
    else:
        from dataclasses import replace

        run = load([str(f) for f in files],
                   options=replace(options, allow_missing=options.allow_missing or bool(missing)))
    result = run.audit()
    doc: dict[str, Any]
    try:
        snap = snapshot_from_run(run, source=label)
    except Exception as exc:  # no pipeline actions: still an audit, no series or gate
        snap = None
        notes.append(f"no per-step series: {exc}")
        doc = {"schema_version": SCHEMA_VERSION, "tool": "pipeaudit", "kind": "window",
               "audit": result.to_dict()}
    else:
        doc = msgspec.json.decode(baseline_json(snap))
    scalars = scalars_of(doc["audit"])
    doc["window"] = {"label": label, "step": step, "files": [str(f) for f in files],
                     "world_size": world_size, "ranks_present": result.ranks_present,
                     "ranks_missing": list(missing), "waited_s": waited_s}
    doc["scalars"] = scalars
    out = WindowAudit(doc=doc, scalars=scalars, notes=notes)
    budgets = thresholds is not None and bool(thresholds.budgets())
    if (baseline is not None or budgets) and snap is not None:
        from pipeaudit.errors import PipeauditError

        try:
            _gate(out, snap, baseline, thresholds, allow_config_change)
        except PipeauditError as exc:  # e.g. the baseline's M differs: the audit still stands
            notes.append(f"not gated: {exc}")
    doc["notes"] = notes
    return out


def _gate(out: WindowAudit, snap, baseline: str | None, thresholds,
          allow_config_change: bool) -> None:
    from pipeaudit.gate import Thresholds, gate, read_document

    base = read_document(baseline, baseline_only=True) if baseline is not None else None
    result = gate(snap, base, thresholds or Thresholds(), allow_config_change=allow_config_change)
    out.gate = result
    out.failed_checks = result.by_verdict("fail")
    out.doc["gate"] = result.to_dict()


def write_audit(path: Path, audit: WindowAudit) -> Path:
    """Write ``audit.json`` atomically."""
    from pipeaudit.jsontext import to_json

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(to_json(audit.doc) + "\n")
    os.replace(tmp, path)
    return path
