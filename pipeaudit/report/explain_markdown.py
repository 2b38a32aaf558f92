"""Markdown reports of ``explain`` and ``whatif`` (tickets, PR comments, CI summaries)."""

from __future__ import annotations

from pipeaudit.explain.critical import COMPUTE, CriticalPath
from pipeaudit.explain.explain import Explanation
from pipeaudit.explain.whatif import Prediction
from pipeaudit.report.explain_text import chain_lines, slack_lines
from pipeaudit.report.fit import fit
from pipeaudit.report.formatting import ms, pct
from pipeaudit.report.markdown import _table, md_fence, md_text


def render_explain_markdown(e: Explanation, *, step: CriticalPath | None = None,
                            timeline_text: str = "", top: int = 5) -> str:
    """The explain report as GitHub-flavoured Markdown."""
    p = step or e.median_step
    out = ["# pipeaudit explain", ""]
    if p is None:
        return "\n".join(out + ["No step to explain."]) + "\n"
    out += ["## Critical path per step", "",
            _table(["step", "step time (ms)", "compute", "communication", "host/launch gaps",
                    "actions on the path"],
                   [[str(s.step), ms(s.step_time_us), pct(s.compute_share), pct(s.comm_share),
                     pct(s.other_share), str(sum(1 for i in s.items if i.what == COMPUTE))]
                    for s in e.steps]),
            "", f"## Critical path of step {p.step}", "",
            "Walked back from the action that ends last, through what bound each start "
            "(ms from the step start):", "", *md_fence(fit("\n".join(chain_lines(p)))),
            "", "## Top causes", "",
            "Each step replayed with one stage/kind 10% faster (mean gain per step):", "",
            _table(["#", "stage", "kind", "gain if 10% faster (ms)", "of the step",
                    "compute on the path (ms)"],
                   [[str(n), str(c.stage), c.kind, ms(c.gain_us_if_10pct_faster),
                     pct(c.gain_share), ms(c.on_path_us)]
                    for n, c in enumerate(e.top_causes[:top], 1)]),
            "", f"All cross-rank delays 10% shorter: {ms(e.comm_gain_us)} ms; all host/launch "
                f"gaps 10% shorter: {ms(e.host_gain_us)} ms.",
            "", f"## Slack of step {p.step}", "", *[f"-{line[1:]}" for line in slack_lines(p)]]
    if timeline_text:
        out += ["", f"## Timeline of step {p.step}", "", *md_fence(timeline_text)]
    if e.notes:
        out += ["", "## Notes", ""] + [f"- {md_text(n)}" for n in e.notes]
    return fit("\n".join(out), markdown=True) + "\n"


def render_whatif_markdown(p: Prediction) -> str:
    """The whatif report as GitHub-flavoured Markdown."""
    b, a = p.before, p.after
    out = ["# pipeaudit whatif", "",
           f"Changes: {md_text(', '.join(p.changes) or 'none')}. Run: "
           f"{md_text(b.get('schedule') or 'unknown')} P={b['num_ranks']} M={b['num_microbatches']} "
           f"v={b.get('num_chunks')}; replayed: {md_text(a.get('schedule') or 'unknown')} "
           f"P={a['num_ranks']} M={a['num_microbatches']} v={a.get('num_chunks')} "
           f"(model: {md_text(p.model)}).", "",
           _table(["", "measured", "predicted", "change"],
                  [["step time (ms)", ms(p.measured_step_time_us), ms(p.predicted_step_time_us),
                    f"{p.change:+.1%}"],
                   ["bubble", pct(p.measured_bubble), pct(p.predicted_bubble), "-"]])]
    c = p.calibration
    if c:
        out += ["", f"Calibration: the same model on the unchanged order predicts "
                    f"{ms(c['unchanged_prediction_us'])} ms against {ms(c['measured_us'])} ms "
                    f"measured ({c['error']:+.1%})."]
    out += ["", "## Assumptions", ""] + [f"- {md_text(x)}" for x in p.assumptions]
    if p.notes:
        out += ["", "## Notes", ""] + [f"- {md_text(n)}" for n in p.notes]
    return fit("\n".join(out), markdown=True) + "\n"
