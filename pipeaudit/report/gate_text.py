"""Text reporter of a gate: first the line naming the checks the baseline is too noisy to
gate (when there are any), then a checks table (the reports' one table style, coloured on a
terminal), the explanation of every failure and warning and a one-line verdict; every line
within :data:`~pipeaudit.report.fit.WIDTH` columns."""

from __future__ import annotations

import io

from typing import TYPE_CHECKING

from pipeaudit.report.fit import WIDTH, console, hanging, print_table, table
from pipeaudit.values import fmt_change, fmt_value

if TYPE_CHECKING:  # types only: the gate does not import the reporters, nor they the gate
    from pipeaudit.gate.model import Check, GateResult

HEADER = ["check", "baseline", "now", "change", "threshold", "verdict"]
_STYLE = {"fail": "bold red", "warn": "yellow", "pass": "green", "skip": "dim"}


def rows(result: GateResult) -> list[list[str]]:
    """One row per check (failures first): the cells of :data:`HEADER`."""
    out = []
    for c in result.sorted_checks():
        base = "-" if c.mode == "budget" else fmt_value(c.baseline, c.unit)
        change = "-" if c.mode == "budget" else fmt_change(c.change, c.mode, c.unit)
        out.append([c.name, base, fmt_value(c.now, c.unit), change, fmt_limit(c), c.verdict.upper()])
    return out


def verdict_line(result: GateResult) -> str:
    """``FAIL: 3 failed, 1 warned, 12 passed, 1 skipped``."""
    n = result.counts()
    parts = [f"{n['fail']} failed", f"{n['warn']} warned", f"{n['pass']} passed"]
    if n["skip"]:
        parts.append(f"{n['skip']} skipped")
    return f"{result.verdict.upper()}: " + ", ".join(parts)


def header_lines(result: GateResult) -> list[str]:
    """What was gated against what (and where the thresholds came from)."""
    lines = [f"pipeaudit gate  run: {result.run_source} ({result.run_config.describe()})"]
    if result.baseline_source and result.baseline_config is not None:
        lines.append(f"baseline: {result.baseline_source} ({result.baseline_config.describe()})")
    if result.thresholds_file:
        lines.append(f"thresholds from {result.thresholds_file}")
    return lines


def _explained(result: GateResult) -> list[Check]:
    return result.explained()


def render_gate_text(result: GateResult, *, color: bool = False, width: int = WIDTH) -> str:
    """The gate report, coloured when ``color`` (a terminal)."""
    from rich.text import Text

    buf = io.StringIO()
    con = console(buf, color=color, width=width)
    say = lambda text, style=None: con.print(hanging(text, width=width), markup=False,  # noqa: E731
                                              style=style)
    noisy = result.noisy_line()
    if noisy:
        say(f"pipeaudit: {noisy}", "yellow")
    for line in header_lines(result):
        say(line)
    t = table(*HEADER)
    for col in t.columns[1:5]:
        col.justify = "right"
    for c, r in zip(result.sorted_checks(), rows(result)):
        t.add_row(*r[:-1], Text(r[-1], style=_STYLE[c.verdict]))
    print_table(con, t)
    explained = _explained(result)
    if explained:
        con.print()
        con.print("Why:", style="bold")
        for c in explained:
            lines = hanging(f"{c.verdict.upper():4}  {c.explanation}", indent=2, hang=6,
                            width=width).split("\n")
            con.print(Text(lines[0][:8], style=_STYLE[c.verdict]) + Text(lines[0][8:]))
            for line in lines[1:]:
                con.print(line, markup=False)
    for n in result.notes:
        say(f"note: {n}", "dim")
    con.print()
    con.print(Text(verdict_line(result), style=_STYLE[result.verdict]))
    return buf.getvalue()


def fmt_limit(c: "Check") -> str:
    """The limit a check was held to, e.g. ``+3.0 pts`` or ``<= 25.0%``."""
    if c.threshold is None:
        return "off"
    if c.mode == "budget":
        return "<= " + fmt_value(c.threshold, c.unit)
    text = fmt_change(c.threshold, c.mode, c.unit)
    if c.noise and c.noise > c.threshold:
        text += f" (noise {fmt_change(c.noise, c.mode, c.unit)})"
    return text
