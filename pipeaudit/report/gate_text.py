"""Text reporter of a gate: first the one line naming the checks the baseline is too noisy to
gate (when there are any), then a checks table (rich on a terminal, plain columns otherwise),
the explanation of every failure and warning and a one-line verdict."""

from __future__ import annotations

import io

from pipeaudit.values import fmt_change, fmt_value
from typing import TYPE_CHECKING

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
    return [c for c in result.sorted_checks() if c.verdict in ("fail", "warn")]


def render_gate_text(result: GateResult, *, color: bool = False, width: int = 120) -> str:
    """The gate report: rich table when ``color`` (a terminal), plain aligned columns otherwise."""
    return _rich(result, width) if color else _plain(result)


def _plain(result: GateResult) -> str:
    table = [HEADER] + rows(result)
    widths = [max(len(r[i]) for r in table) for i in range(len(HEADER))]
    noisy = result.noisy_line()
    out = ([f"pipeaudit: {noisy}"] if noisy else []) + header_lines(result) + [""]
    for i, r in enumerate(table):
        cells = [r[0].ljust(widths[0])] + [x.rjust(w) for x, w in zip(r[1:-1], widths[1:-1])]
        out.append("  ".join(cells + [r[-1]]).rstrip())
        if i == 0:
            out.append("  ".join("-" * w for w in widths))
    explained = _explained(result)
    if explained:
        out += ["", "Why:"]
        out += [f"  {c.verdict.upper():4}  {c.explanation}" for c in explained]
    out += [f"note: {n}" for n in result.notes]
    out += ["", verdict_line(result)]
    return "\n".join(out) + "\n"


def _rich(result: GateResult, width: int) -> str:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    buf = io.StringIO()
    con = Console(file=buf, force_terminal=True, width=width, highlight=False, soft_wrap=False)
    noisy = result.noisy_line()
    if noisy:
        con.print(f"pipeaudit: {noisy}", markup=False, style="yellow", soft_wrap=True)
    for line in header_lines(result):
        con.print(line, markup=False)
    table = Table(*HEADER)
    for col in table.columns[1:5]:
        col.justify = "right"
    for c, r in zip(result.sorted_checks(), rows(result)):
        table.add_row(*r[:-1], Text(r[-1], style=_STYLE[c.verdict]))
    con.print(table)
    explained = _explained(result)
    if explained:
        con.print("[bold]Why[/]")
        for c in explained:
            con.print(Text(f"  {c.verdict.upper():4}  ", style=_STYLE[c.verdict]) +
                      Text(c.explanation))
    for n in result.notes:
        con.print(f"note: {n}", markup=False, style="dim")
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
