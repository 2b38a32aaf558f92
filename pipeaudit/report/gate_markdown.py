"""Markdown reporter of a gate (PR comments, ``$GITHUB_STEP_SUMMARY``)."""

from __future__ import annotations

from pipeaudit.report.gate_text import HEADER, rows, verdict_line
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # types only: the gate does not import the reporters, nor they the gate
    from pipeaudit.gate.model import GateResult

_ICON = {"FAIL": "❌ fail", "WARN": "⚠️ warn", "PASS": "✅ pass", "SKIP": "➖ skip"}


def cell(text: str) -> str:
    """Escape a table cell: pipes and line breaks."""
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def render_gate_markdown(result: GateResult) -> str:
    """The gate report as GitHub-flavoured Markdown."""
    icon = _ICON[result.verdict.upper()].split()[0]
    out = [f"## pipeaudit gate: {icon} {verdict_line(result)}", ""]
    out.append(f"- run: `{result.run_source}` ({result.run_config.describe()})")
    if result.baseline_source and result.baseline_config is not None:
        out.append(f"- baseline: `{result.baseline_source}` ({result.baseline_config.describe()})")
    if result.thresholds_file:
        out.append(f"- thresholds from `{result.thresholds_file}`")
    explained = [c for c in result.sorted_checks() if c.verdict in ("fail", "warn")]
    if explained:
        out += ["", "### Why", ""]
        out += [f"- **{c.verdict}** {cell(c.explanation)}" for c in explained]
    out += ["", "### Checks", "", "| " + " | ".join(HEADER) + " |",
            "|:---|---:|---:|---:|---:|:---|"]
    for r in rows(result):
        out.append("| " + " | ".join([cell(x) for x in r[:-1]] + [_ICON[r[-1]]]) + " |")
    if result.notes:
        out += ["", "### Notes", ""] + [f"- {cell(n)}" for n in result.notes]
    return "\n".join(out) + "\n"
