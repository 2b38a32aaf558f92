"""GitHub Actions reporter of a gate: workflow-command annotations and a step summary.

Failures become ``::error``, warnings ``::warning``, notes and the verdict
``::notice``. Messages escape ``%``, CR and LF; properties (``title``) also
escape ``:`` and ``,`` (as the Actions runner and @actions/core do).
"""

from __future__ import annotations

import os

from pipeaudit.report.gate_text import verdict_line
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # types only: the gate does not import the reporters, nor they the gate
    from pipeaudit.gate.model import GateResult


def escape_data(text: str) -> str:
    """Escape a workflow-command message."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """Escape a workflow-command property value."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def command(level: str, message: str, **props: str) -> str:
    """One workflow command line, e.g. ``::error title=...::message``."""
    p = ",".join(f"{k}={escape_property(v)}" for k, v in props.items())
    return f"::{level}{' ' + p if p else ''}::{escape_data(message)}"


def render_gate_github(result: GateResult) -> str:
    """The annotations, one per line: failures, warnings, cleared rises (notices), then the
    verdict."""
    noisy = result.noisy_line()
    lines = [command("warning", noisy, title="pipeaudit gate: noisy baseline")] if noisy else []
    for c in result.sorted_checks():
        if c.verdict == "fail":
            lines.append(command("error", c.explanation, title=f"pipeaudit gate: {c.name}"))
        elif c.verdict == "warn":
            lines.append(command("warning", c.explanation, title=f"pipeaudit gate: {c.name}"))
        elif c.cleared:
            lines.append(command("notice", c.explanation, title=f"pipeaudit gate: {c.name}"))
    for n in result.notes:
        lines.append(command("notice", n, title="pipeaudit gate note"))
    lines.append(command("notice", verdict_line(result) + f" (run {result.run_source}"
                         + (f", baseline {result.baseline_source})" if result.baseline_source
                            else ")"), title="pipeaudit gate"))
    return "\n".join(lines) + "\n"


def append_step_summary(markdown: str, path: str | None = None) -> str | None:
    """Append ``markdown`` to ``$GITHUB_STEP_SUMMARY`` (or ``path``); the file written, if any."""
    target = path or os.environ.get("GITHUB_STEP_SUMMARY")
    if not target:
        return None
    with open(target, "a", encoding="utf-8") as fh:
        fh.write(markdown if markdown.endswith("\n") else markdown + "\n")
    return target
