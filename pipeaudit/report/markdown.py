"""Markdown reporter: the audit as GitHub-flavoured Markdown (tickets, PR comments, CI summaries).

Everything that came from the inputs (file names, event names, a manifest's schedule, notes
and findings that quote them) is escaped before it is written (:func:`md_text`,
:func:`md_code`, :func:`md_fence`): a trace or a manifest cannot add markup, links or HTML
(``</script>``, ``<img onerror=...>``) to a report meant for a PR comment. The other Markdown
reporters (``*_markdown.py``) use the same helpers.
"""

from __future__ import annotations

import re

from pipeaudit.audit.result import AuditResult
from pipeaudit.report.fit import fit
from pipeaudit.report.formatting import finding_values, finding_where, mib, ms, pct
from pipeaudit.report.published_text import NO_PUBLISHED, published_lines
from pipeaudit.report.run_facts import (
    PIPELINE_COLUMNS,
    bubble_title,
    fact_lines,
    job_lines,
    m_text,
    one_process,
    pipeline_rows,
    shape_text,
)
from pipeaudit.report.step_view import timeline_caption

#: Characters that can start Markdown or HTML markup inline (CommonMark lets any ASCII
#: punctuation be backslash-escaped; these are the ones that matter, ``|`` for tables).
_MARKUP = re.compile(r"[\\`*_{}\[\]<>&|~#!]")
_BACKTICKS = re.compile(r"`+")


def _one_line(text: object) -> str:
    return str(text).replace("\r\n", " ").replace("\r", " ").replace("\n", " ")


def md_text(text: object) -> str:
    """Inline text from the inputs, escaped: markup characters backslashed, one line."""
    return _MARKUP.sub(lambda m: "\\" + m.group(), _one_line(text))


def md_code(text: object) -> str:
    """Inline code of text from the inputs (a path): fenced by more backticks than any run
    inside it, so that it cannot close the span early; one line."""
    s = _one_line(text)
    fence = "`" * (max((len(r) for r in _BACKTICKS.findall(s)), default=0) + 1)
    pad = " " if s[:1] == "`" or s[-1:] == "`" else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def md_fence(text: str) -> list[str]:
    """A fenced code block of ``text``: the fence is longer than any run of backticks in it."""
    fence = "`" * max(3, max((len(r) for r in _BACKTICKS.findall(text)), default=0) + 1)
    return [fence, text, fence]


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _theory_note(b) -> list[str]:
    """What theory is, the source's published figure and why it differs from the theory."""
    if b.theory is None:
        return []
    lines = published_lines(b.published) or [NO_PUBLISHED]
    head, *rest = lines
    return ["", "Theory is the per-step figure at the measured mean T_F, T_B, T_W (closed form, "
            "or a replay of the schedule's order where none holds).", "",
            f"- **{head.split(':', 1)[0]}**:{head.split(':', 1)[1]}"] + [
        f"  - {line.strip()}" for line in rest]


def render_markdown(r: AuditResult, *, timeline_text: str = "", timeline_step: int | None = None) -> str:
    """The audit result as a Markdown document."""
    out = ["# pipeaudit report", ""]
    if r.pipeline_found:
        out.append(f"Schedule **{md_text(r.schedule or 'unknown')}** ({md_text(r.schedule_source)}), "
                   f"{shape_text(r)}, "
                   f"M={m_text(r)}, {r.num_steps} step(s), device {md_text(r.device_type)}.")
        out += [""] + [f"- {md_text(line)}" for line in fact_lines(r)]
        b = r.bubble
        out += ["", "## " + bubble_title(r), "",
                _table(["measured", "theory", "formula", "replay ideal", "imbalance part",
                        "overhead part", "median step (ms)"],
                       [[pct(b.measured), pct(b.theory), f"`{b.theory_formula}`" if b.theory_formula
                         else "-", pct(b.replay_ideal), pct(b.imbalance_part), pct(b.overhead_part),
                         ms(r.step_time_us)]]),
                *_theory_note(b)]
        if len(r.pipelines) > 1:
            out += ["", "## Pipeline replicas", "", _table(list(PIPELINE_COLUMNS), pipeline_rows(r)),
                    ""] + [f"- {line}" for line in job_lines(r)]
        recvs = any(s.recv_wait_us is not None for s in r.stages)
        out += ["", "## Stages", "",
                _table(["stage", "rank", "F", "B", "I", "W", "F ms", "B ms", "I ms", "W ms",
                        "in-flight", "expected"] + (["recv wait ms", "recv transfer ms"] if recvs else []),
                       [[str(s.stage), str(s.rank), *(str(s.actions[k]) for k in "FBIW"),
                         *(ms(s.mean_compute_us[k]) if s.actions[k] else "-" for k in "FBIW"),
                         str(s.peak_inflight), str(s.expected_peak_inflight)
                         if s.expected_peak_inflight is not None else "-"]
                        + ([ms(s.recv_wait_us), ms(s.recv_transfer_us)] if recvs else [])
                        for s in r.stages])]
    else:
        out.append(f"No pipeline actions found in {r.num_ranks} rank(s); busy/idle/communication only.")
    out += ["", "## Ranks", "",
            _table(["rank", "bubble", "replay", "idle", "compute ms", "comm ms", "exposed ms",
                    "overlap", "peak MiB"],
                   [[str(x.rank), pct(x.bubble), pct(x.replay_bubble), pct(x.idle_fraction),
                     ms(x.compute_us), ms(x.comm_us), ms(x.exposed_comm_us), pct(x.overlap),
                     mib(x.peak_allocated_bytes)] for x in r.ranks])]
    if timeline_text:
        out += ["", f"## Timeline of step {timeline_step}", ""]
        caption = timeline_caption(r, timeline_step) if timeline_step is not None else ""
        if caption:
            out += [md_text(caption[:1].upper() + caption[1:]) + ".", ""]
        out += md_fence(timeline_text)
    out += ["", "## Findings", ""]
    if not r.findings:
        out.append("None: the run matches its schedule's theory.")
    for f in r.findings:
        where = finding_where(f, one_process=one_process(r))
        vals = finding_values(f)
        out.append(f"- **{f.severity}** `{f.code}`{' ' + where if where else ''}{md_text(vals)}: "
                   f"{md_text(f.message)}")
    if r.notes:
        out += ["", "## Notes", ""] + [f"- {md_text(n)}" for n in r.notes]
    return fit("\n".join(out), markdown=True) + "\n"
