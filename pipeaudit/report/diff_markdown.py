"""Markdown reporter of ``pipeaudit diff``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeaudit.report.diff_text import pipeline_rows, stage_table
from pipeaudit.report.fit import fit
from pipeaudit.report.markdown import md_code
from pipeaudit.report.markdown import md_text as cell

if TYPE_CHECKING:  # types only: the gate does not import the reporters, nor they the gate
    from pipeaudit.gate.diff import RunDiff


def _table(header: list[str], body: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(cell(h) for h in header) + " |",
             "|:---|" + "|".join("---:" for _ in header[1:]) + "|"]
    return lines + ["| " + " | ".join(cell(x) for x in r) + " |" for r in body]


def render_diff_markdown(d: RunDiff) -> str:
    """The diff as GitHub-flavoured Markdown."""
    out = ["## pipeaudit diff", "", f"- A: {md_code(d.a_source)} ({cell(d.a_config)})",
           f"- B: {md_code(d.b_source)} ({cell(d.b_config)})"]
    if d.config_changes:
        out.append(f"- configuration changed: {cell('; '.join(d.config_changes))}")
    out += ["", f"**{cell(d.summary())}**", "", "### Pipeline", ""]
    out += _table(["metric", "A", "B", "change"], pipeline_rows(d))
    out += ["", "### Stages", "",
            "A -> B in each cell: the median over steps of the compute per step, by kind (ms); "
            "bubble, overlap and memory of the stage's rank.", ""]
    out += _table(*stage_table(d))
    if d.notes:
        out += [""] + [f"- note: {cell(n)}" for n in d.notes]
    return fit("\n".join(out), markdown=True) + "\n"
