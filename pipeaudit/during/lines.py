"""``pipeaudit watch``'s text: one line per window as it lands, the series at the end."""

from __future__ import annotations

from pipeaudit.during.watch import WatchedWindow
from pipeaudit.report.fit import hanging, render, table


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def window_line(w: WatchedWindow) -> str:
    """``step 4: bubble 52.4% (theory 27.3%, replay 44.2%) step 485.01 ms ...``."""
    ranks = f"{len(w.window.ranks)}/{w.window.world_size or '?'} ranks"
    if w.skipped:
        return f"{w.label}: skipped ({ranks}): {w.skipped}"
    if w.audit is None:
        return f"{w.label}: not audited ({ranks}): {w.error}"
    s = w.audit.scalars
    parts = [f"{w.label}: bubble {_pct(s.get('bubble'))} (theory {_pct(s.get('theory'))}, "
             f"replay {_pct(s.get('replay_ideal'))})"]
    if "step_time_ms" in s:
        parts.append(f"step {s['step_time_ms']:.2f} ms")
    if "exposed_comm" in s:
        parts.append(f"exposed comm {_pct(s['exposed_comm'])}")
    if "stage_imbalance" in s:
        parts.append(f"imbalance {s['stage_imbalance']:.2f}x")
    parts.append(ranks)
    line = _joined(parts)
    for note in w.audit.notes:
        line += "\n" + hanging(f"note: {note}", indent=2)
    if w.audit.gate is not None:
        if w.audit.failed_checks:
            line += "\n" + "\n".join(hanging(f"REGRESSION {c.explanation}", indent=2, hang=11)
                                      for c in w.audit.failed_checks)
        else:
            line += f"\n  gate: {w.audit.gate.verdict}"
    return line


def _joined(parts: list[str], width: int = 120) -> str:
    """``parts`` joined by ``, `` on lines of at most ``width`` columns (the next indented)."""
    lines = [parts[0]]
    for part in parts[1:]:
        if len(lines[-1]) + 2 + len(part) > width:
            lines[-1] += ","
            lines.append("  " + part)
        else:
            lines[-1] += ", " + part
    return "\n".join(lines)


def series_table(windows: list[WatchedWindow]) -> str:
    """The windows' numbers, one row each, in the reports' one table style."""
    t = table("window", "bubble", "theory", "replay", "step ms", "exposed", "imbalance", "ranks",
              "gate")
    for col in t.columns[1:]:
        col.justify = "right"
    for w in windows:
        s = w.audit.scalars if w.audit else {}
        gate = "-" if not w.audit or w.audit.gate is None else \
            ("FAIL" if w.audit.failed_checks else w.audit.gate.verdict)
        t.add_row(w.label, _pct(s.get("bubble")), _pct(s.get("theory")),
                  _pct(s.get("replay_ideal")),
                  f"{s['step_time_ms']:.2f}" if "step_time_ms" in s else "-",
                  _pct(s.get("exposed_comm")),
                  f"{s['stage_imbalance']:.2f}x" if "stage_imbalance" in s else "-",
                  f"{len(w.window.ranks)}/{w.window.world_size or '?'}",
                  gate if w.audit else "skipped" if w.skipped else "error")
    return render(t)
