"""Markdown reporter of a gate (PR comments, ``$GITHUB_STEP_SUMMARY``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeaudit.report.fit import fit
from pipeaudit.report.gate_text import HEADER, rows, verdict_line
from pipeaudit.report.markdown import md_code, md_text

if TYPE_CHECKING:  # types only: the gate does not import the reporters, nor they the gate
    from pipeaudit.gate.model import GateResult

_ICON = {"FAIL": "❌ fail", "WARN": "⚠️ warn", "PASS": "✅ pass", "SKIP": "➖ skip"}


def cell(text: str) -> str:
    """A table cell (or inline text) from the inputs, escaped (see
    :func:`pipeaudit.report.markdown.md_text`): pipes, markup and line breaks."""
    return md_text(text)


def render_gate_markdown(result: GateResult) -> str:
    """The gate report as GitHub-flavoured Markdown."""
    icon = _ICON[result.verdict.upper()].split()[0]
    out = [f"## pipeaudit gate: {icon} {cell(verdict_line(result))}", ""]
    noisy = result.noisy_line()
    if noisy:
        out += [f"**{cell(noisy)}**", ""]
    out.append(f"- run: {md_code(result.run_source)} ({cell(result.run_config.describe())})")
    if result.baseline_source and result.baseline_config is not None:
        out.append(f"- baseline: {md_code(result.baseline_source)} "
                   f"({cell(result.baseline_config.describe())})")
    if result.thresholds_file:
        out.append(f"- thresholds from {md_code(result.thresholds_file)}")
    explained = result.explained()
    if explained:
        out += ["", "### Why", ""]
        out += [f"- **{c.verdict}** {cell(c.explanation)}" for c in explained]
    out += ["", "### Checks", "", "| " + " | ".join(HEADER) + " |",
            "|:---|---:|---:|---:|---:|:---|"]
    for r in rows(result):
        out.append("| " + " | ".join([cell(x) for x in r[:-1]] + [_ICON[r[-1]]]) + " |")
    if result.notes:
        out += ["", "### Notes", ""] + [f"- {cell(n)}" for n in result.notes]
    return fit("\n".join(out), markdown=True) + "\n"
