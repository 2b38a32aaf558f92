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
from pipeaudit.report.formatting import mib, ms, num, pct
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


def render_markdown(r: AuditResult, *, timeline_text: str = "", timeline_step: int | None = None) -> str:
    """The audit result as a Markdown document."""
    out = ["# pipeaudit report", ""]
    if r.pipeline_found:
        out.append(f"Schedule **{md_text(r.schedule or 'unknown')}** ({md_text(r.schedule_source)}), "
                   f"P={r.num_ranks}, {r.num_stages} stages (v={r.num_chunks}), "
                   f"M={r.num_microbatches}, {r.num_steps} step(s), device {md_text(r.device_type)}.")
        if r.actions_inferred:
            out.append("\n> Actions were inferred from the ops (the trace has no per-action annotations).")
        b = r.bubble
        out += ["", "## Pipeline bubble", "",
                _table(["measured", "theory", "formula", "replay ideal", "imbalance part",
                        "overhead part", "median step (ms)"],
                       [[pct(b.measured), pct(b.theory), f"`{b.theory_formula}`" if b.theory_formula
                         else "-", pct(b.replay_ideal), pct(b.imbalance_part), pct(b.overhead_part),
                         ms(r.step_time_us)]]),
                "", "## Stages", "",
                _table(["stage", "rank", "F", "B", "I", "W", "F ms", "B ms", "I ms", "W ms",
                        "in-flight", "expected"],
                       [[str(s.stage), str(s.rank), *(str(s.actions[k]) for k in "FBIW"),
                         *(ms(s.mean_compute_us[k]) if s.actions[k] else "-" for k in "FBIW"),
                         str(s.peak_inflight), str(s.expected_peak_inflight)
                         if s.expected_peak_inflight is not None else "-"] for s in r.stages])]
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
        where = ", ".join(x for x in (f"rank {f.rank}" if f.rank is not None else "",
                                      f"stage {f.stage}" if f.stage is not None else "") if x)
        vals = f" (measured {num(f.measured)}, expected {num(f.expected)})" \
            if f.measured is not None and f.expected is not None else ""
        out.append(f"- **{f.severity}** `{f.code}`{' ' + where if where else ''}{vals}: "
                   f"{md_text(f.message)}")
    if r.notes:
        out += ["", "## Notes", ""] + [f"- {md_text(n)}" for n in r.notes]
    return "\n".join(out) + "\n"
