"""Text reporter of ``pipeaudit diff``: pipeline figures and a per-stage side-by-side table."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeaudit.actions import KINDS
from pipeaudit.report.fit import fit, render, table
from pipeaudit.values import fmt_change, fmt_value

if TYPE_CHECKING:  # types only: the gate does not import the reporters, nor they the gate
    from pipeaudit.gate.diff import RunDiff


STAGES_TITLE = ("Stages, A -> B (median over steps of the compute per step, by kind; bubble, "
                "overlap and memory of the stage's rank)")


def pipeline_rows(d: RunDiff) -> list[list[str]]:
    return [[r.metric, fmt_value(r.a, r.unit), fmt_value(r.b, r.unit),
             fmt_change(r.change, r.mode, r.unit)] for r in d.pipeline]


def _kinds(d: RunDiff) -> list[str]:
    return [k for k in KINDS if any(k in s.a.compute_us or k in s.b.compute_us for s in d.stages)]


def stage_header(d: RunDiff) -> list[str]:
    return (["stage", "rank"] + [f"{k} ms" for k in _kinds(d)] +
            ["compute ms", "change", "bubble", "overlap", "MiB", "in-flight"])


def stage_table(d: RunDiff) -> tuple[list[str], list[list[str]]]:
    """The per-stage header and rows, each cell ``A -> B``, less the columns that neither
    run has (``- -> -`` on every row: no memory events in either)."""
    header, body = stage_header(d), stage_rows(d)
    keep = [i for i in range(len(header)) if not body or any(r[i] != "- -> -" for r in body)]
    return [header[i] for i in keep], [[r[i] for i in keep] for r in body]


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


def _grid(title: str, header: list[str], body: list[list[str]]) -> str:
    """A table in the reports' one style: the first column left, the others right; a header
    wraps at its spaces where the columns would not fit."""
    t = table(title=title)
    for i, h in enumerate(header):
        t.add_column(h, justify="left" if i == 0 else "right", no_wrap=False, overflow="fold")
    for r in body:
        t.add_row(*r)
    return render(t)


def render_diff_text(d: RunDiff) -> str:
    """The diff as plain text (CI logs, terminals), at most
    :data:`~pipeaudit.report.fit.WIDTH` columns."""
    out = ["pipeaudit diff", f"A: {d.a_source} ({d.a_config})", f"B: {d.b_source} ({d.b_config})"]
    if d.config_changes:
        out.append("configuration changed: " + "; ".join(d.config_changes))
    out += ["", _grid("Pipeline", ["metric", "A", "B", "change"], pipeline_rows(d))]
    out += ["", _grid(STAGES_TITLE, *stage_table(d))]
    out += ["", d.summary()] + [f"note: {n}" for n in d.notes]
    return fit("\n".join(out)) + "\n"
