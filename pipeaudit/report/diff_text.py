"""Text reporter of ``pipeaudit diff``: pipeline figures and a per-stage side-by-side table."""

from __future__ import annotations

from pipeaudit.actions import KINDS
from pipeaudit.values import fmt_change, fmt_value
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # types only: the gate does not import the reporters, nor they the gate
    from pipeaudit.gate.diff import RunDiff


STAGES_TITLE = ("Stages (median over steps of the compute per step, by kind; bubble, overlap "
                "and memory of the stage's rank)")


def pipeline_rows(d: RunDiff) -> list[list[str]]:
    return [[r.metric, fmt_value(r.a, r.unit), fmt_value(r.b, r.unit),
             fmt_change(r.change, r.mode, r.unit)] for r in d.pipeline]


def _kinds(d: RunDiff) -> list[str]:
    return [k for k in KINDS if any(k in s.a.compute_us or k in s.b.compute_us for s in d.stages)]


def stage_header(d: RunDiff) -> list[str]:
    return (["stage", "rank"] + [f"{k} ms A->B" for k in _kinds(d)] +
            ["compute ms A->B", "change", "bubble A->B", "overlap A->B", "MiB A->B", "in-flight A->B"])


def _pair(a, b, unit: str) -> str:
    return f"{fmt_value(a, unit).replace(' ms', '').replace(' MiB', '')} -> " \
           f"{fmt_value(b, unit).replace(' ms', '').replace(' MiB', '')}"


def stage_rows(d: RunDiff) -> list[list[str]]:
    out = []
    for s in d.stages:
        rank = _pair(s.a.rank, s.b.rank, "count") if s.a.rank != s.b.rank else str(s.a.rank)
        out.append([str(s.stage), rank]
                   + [_pair(s.a.compute_us.get(k), s.b.compute_us.get(k), "us") for k in _kinds(d)]
                   + [_pair(s.a.total_us, s.b.total_us, "us"),
                      fmt_change(s.compute_change, "rel", "us"),
                      _pair(s.a.bubble, s.b.bubble, "fraction"),
                      _pair(s.a.overlap, s.b.overlap, "fraction"),
                      _pair(s.a.peak_bytes, s.b.peak_bytes, "bytes"),
                      _pair(s.a.inflight, s.b.inflight, "count")])
    return out


def _grid(header: list[str], body: list[list[str]]) -> list[str]:
    table = [header] + body
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    lines = []
    for i, r in enumerate(table):
        lines.append("  ".join([r[0].ljust(widths[0])] + [x.rjust(w) for x, w in
                                                          zip(r[1:], widths[1:])]).rstrip())
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    return lines


def render_diff_text(d: RunDiff) -> str:
    """The diff as plain text (CI logs, terminals)."""
    out = ["pipeaudit diff", f"A: {d.a_source} ({d.a_config})", f"B: {d.b_source} ({d.b_config})"]
    if d.config_changes:
        out.append("configuration changed: " + "; ".join(d.config_changes))
    out += ["", "Pipeline"] + _grid(["metric", "A", "B", "change"], pipeline_rows(d))
    out += ["", STAGES_TITLE]
    out += _grid(stage_header(d), stage_rows(d))
    out += ["", d.summary()] + [f"note: {n}" for n in d.notes]
    return "\n".join(out) + "\n"
