"""pipeaudit.report: every output format of every command, one module per format, behind one
registry.

    from pipeaudit.report import render
    text = render("gate", result, "junit")

:func:`render` looks the (subject, format) pair up in :data:`RENDERERS`, imports the module
that renders it on first use (a command pays only for the formats it prints) and passes it
the options it takes. Commands never choose a renderer themselves.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

#: (subject, format) -> (module, function). Each function takes the result and returns text.
RENDERERS: dict[tuple[str, str], tuple[str, str]] = {
    ("analyze", "text"): ("pipeaudit.report.terminal", "render_analyze_text"),
    ("analyze", "markdown"): ("pipeaudit.report.markdown", "render_markdown"),
    ("analyze", "json"): ("pipeaudit.report.json_doc", "render_json"),
    ("gate", "text"): ("pipeaudit.report.gate_text", "render_gate_text"),
    ("gate", "json"): ("pipeaudit.report.json_doc", "render_json"),
    ("gate", "junit"): ("pipeaudit.report.gate_junit", "render_gate_junit"),
    ("gate", "github"): ("pipeaudit.report.gate_github", "render_gate_github"),
    ("gate", "markdown"): ("pipeaudit.report.gate_markdown", "render_gate_markdown"),
    ("diff", "text"): ("pipeaudit.report.diff_text", "render_diff_text"),
    ("diff", "markdown"): ("pipeaudit.report.diff_markdown", "render_diff_markdown"),
    ("diff", "json"): ("pipeaudit.report.json_doc", "render_json"),
    ("explain", "text"): ("pipeaudit.report.explain_text", "render_explain_text"),
    ("explain", "markdown"): ("pipeaudit.report.explain_markdown", "render_explain_markdown"),
    ("explain", "json"): ("pipeaudit.report.json_doc", "render_json"),
    ("whatif", "text"): ("pipeaudit.report.explain_text", "render_whatif_text"),
    ("whatif", "markdown"): ("pipeaudit.report.explain_markdown", "render_whatif_markdown"),
    ("whatif", "json"): ("pipeaudit.report.json_doc", "render_json"),
    ("advise", "text"): ("pipeaudit.report.advise_text", "render_advise_text"),
    ("advise", "markdown"): ("pipeaudit.report.advise_text", "render_advise_markdown"),
    ("advise", "json"): ("pipeaudit.report.json_doc", "render_json"),
    ("sweep", "text"): ("pipeaudit.report.sweep_text", "render_text"),
    ("sweep", "json"): ("pipeaudit.sweep.results", "to_json_text"),
    ("sweep", "csv"): ("pipeaudit.sweep.results", "to_csv_text"),
    ("hta", "text"): ("pipeaudit.report.hta_text", "render_text"),
    ("simulation", "text"): ("pipeaudit.report.simulate_text", "render_simulation_text"),
    ("simulation", "json"): ("pipeaudit.report.simulate_json", "render_simulation_json"),
    ("comparison", "text"): ("pipeaudit.report.simulate_text", "render_compare"),
    ("comparison", "json"): ("pipeaudit.report.simulate_json", "render_compare_json"),
    ("microbatch-sweep", "text"): ("pipeaudit.report.simulate_text", "render_sweep"),
    ("microbatch-sweep", "json"): ("pipeaudit.report.simulate_json", "render_sweep_json"),
}


def formats(subject: str) -> list[str]:
    """The formats ``subject`` can be rendered in."""
    return [fmt for (subj, fmt) in RENDERERS if subj == subject]


def render(subject: str, result: Any, fmt: str, **options: Any) -> str:
    """``result`` of ``subject`` (a command's result) as text in format ``fmt``; ``options``
    the renderer does not take are ignored (e.g. ``color`` for JSON)."""
    try:
        module, name = RENDERERS[(subject, fmt)]
    except KeyError:
        raise ValueError(f"no {fmt!r} report of {subject!r} (formats: "
                         f"{', '.join(formats(subject)) or 'none'})") from None
    fn = getattr(importlib.import_module(module), name)
    params = inspect.signature(fn).parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        options = {k: v for k, v in options.items() if k in params}
    return fn(result, **options)
