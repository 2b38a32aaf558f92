"""The ``advise`` report as plain text and as Markdown: the measured configuration, the ranked
candidates with their predicted step time, bubble and peak memory, why each is faster or
slower, the exact change that runs the best, and (after ``--verify``) predicted against
measured."""

from __future__ import annotations

from pipeaudit.advise.advise import Advice
from pipeaudit.report.fit import fit, render, table
from pipeaudit.report.formatting import ms, pct

CANDIDATE_COLUMNS = ("#", "schedule", "v", "M", "layers", "step ms", "bubble", "peak MiB", "fits",
                     "why")


def _mib(x: int | None) -> str:
    return "-" if x is None else f"{x / 2**20:.1f}"


def _layers(split) -> str:
    return "-" if split is None else ",".join(map(str, split))


def _fits(x: bool | None) -> str:
    return "-" if x is None else ("yes" if x else "no")


def candidate_rows(a: Advice, top: int | None) -> list[list[str]]:
    shown = a.candidates if top is None else a.candidates[:top]
    return [[str(i + 1), c.schedule + (" (ran)" if c.measured else ""), str(c.chunks),
             str(c.microbatches), _layers(c.stage_layers), ms(c.predicted_step_time_us),
             pct(c.predicted_bubble),
             _mib(c.predicted_peak_memory_bytes), _fits(c.fits), c.why]
            for i, c in enumerate(shown)]


def _verified_rows(a: Advice) -> list[list[str]]:
    return [[v["schedule"] + (" (ran)" if v["is_measured_configuration"] else ""),
             str(v["chunks"]), str(v["microbatches"]), _layers(v.get("stage_layers")),
             ms(v["predicted_step_time_us"]),
             ms(v["measured_step_time_us"]), f"{v['error_raw']:+.1%}", f"{v['error']:+.1%}",
             f"{v['error_learned']:+.1%}" if "error_learned" in v else "-",
             _mib(v["predicted_peak_memory_bytes"]), _mib(v["measured_peak_memory_bytes"]),
             "-" if v["memory_error"] is None else f"{v['memory_error']:+.1%}"]
            for v in a.verified]


_VHEAD = ("schedule", "v", "M", "layers", "predicted ms", "measured ms", "error", "calibrated", "learned",
          "pred MiB", "meas MiB", "mem error")


def summary_lines(a: Advice) -> list[str]:
    m, c = a.measured, a.calibration
    out = [f"measured: {m['schedule']} v={m['chunks']} M={m['microbatches']}: step "
           f"{ms(m['step_time_us'])} ms, bubble {pct(m['bubble'])}, peak "
           f"{_mib(m['peak_memory_bytes'])} MiB",
           f"model check: the measured configuration predicted at "
           f"{ms(c['predicted_step_time_us'])} ms ({c['error']:+.1%})"]
    if a.memory_cap_bytes is not None:
        out.append(f"memory cap: {_mib(a.memory_cap_bytes)} MiB per rank")
    best = a.best
    if best is not None:
        split = (f" layers {_layers(best.stage_layers)}"
                 if best.stage_layers is not None and not best.measured else "")
        out.append(f"advice: {best.schedule} v={best.chunks} M={best.microbatches}{split}"
                   + (" (what the run ran: keep it)" if best.measured else
                      f", predicted {ms(best.predicted_step_time_us)} ms per step"))
        from pipeaudit.advise.verify import how_to_run, split_advice_lines
        out += [f"  {line}" for line in how_to_run(best)]
        out += split_advice_lines(a)
    p = a.proven
    if p is not None:
        what = ("the measured configuration: keep it" if p["is_measured_configuration"] else
                f"{1 - 1 / p['speedup']:.1%} less step time than the measured configuration's rerun"
                if p["speedup"] else "")
        split = "" if p.get("stage_layers") is None else f" layers {_layers(p['stage_layers'])}"
        out.append(f"proven by {p['reruns']} reruns: {p['schedule']} v={p['chunks']} "
                   f"M={p['microbatches']}{split} ran fastest of those that fit, "
                   f"{ms(p['measured_step_time_us'])} ms per step ({what})")
    elif a.verified:
        out.append("proven by reruns: none of the reruns fit the memory cap")
    return out


def _table(title: str, head, rows, wrap: str | None = None) -> str:
    """A table in the reports' one style; only the ``wrap`` column wraps its text."""
    t = table(title=title)
    for h in head:
        t.add_column(h, no_wrap=h != wrap, overflow="fold",
                     justify="right" if h in ("#", "v", "M", "step ms", "bubble", "peak MiB")
                     else "left")
    for r in rows:
        t.add_row(*r)
    return render(t)


def render_advise_text(a: Advice, top: int | None = 10) -> str:
    """Plain text report: at most :data:`~pipeaudit.report.fit.WIDTH` columns, long lines
    wrapped with a hanging indent."""
    out = ["pipeaudit advise  " + ", ".join(a.inputs[:2]) + (" ..." if len(a.inputs) > 2 else "")]
    out += summary_lines(a) + [""]
    out.append(_table("Candidates (fitting first, each group by predicted step time)",
                      CANDIDATE_COLUMNS, candidate_rows(a, top), wrap="why"))
    if a.verified:
        out += ["", _table("Verified by reruns", _VHEAD, _verified_rows(a))]
    out += ["", "assumptions:"] + [f"  - {x}" for x in a.assumptions]
    out += [f"note: {n}" for n in a.notes]
    return fit("\n".join(out), hang=2) + "\n"


def render_advise_markdown(a: Advice, top: int | None = 10) -> str:
    """Markdown report (tables), for tickets and CI summaries."""
    def md(head, rows):
        esc = lambda s: str(s).replace("|", "\\|")  # noqa: E731
        return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + \
            ["| " + " | ".join(esc(x) for x in r) + " |" for r in rows]

    out = ["# pipeaudit advise", ""] + [f"- {line.strip()}" for line in summary_lines(a)] + [""]
    out += md(CANDIDATE_COLUMNS, candidate_rows(a, top))
    if a.verified:
        out += ["", "## Verified by reruns", ""] + md(_VHEAD, _verified_rows(a))
    out += ["", "## Assumptions", ""] + [f"- {x}" for x in a.assumptions]
    out += [f"- note: {n}" for n in a.notes]
    return fit("\n".join(out), markdown=True) + "\n"
