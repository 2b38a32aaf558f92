"""Terminal reporter: one screen by default (the run, its bubble summary, one step's timeline,
the top findings); ``verbose`` adds the theory and published-formula notes, the per-stage and
per-rank tables, every finding and the notes. The HTML page always holds everything."""

from __future__ import annotations

from typing import TextIO

from rich.console import Console
from rich.markup import escape

from pipeaudit.audit.result import AuditResult
from pipeaudit.report.fit import HANG, hanging, print_table, table
from pipeaudit.report.formatting import finding_values, finding_where, inputs_line, mib, ms, pct
from pipeaudit.report.published_text import NO_PUBLISHED, published_lines
from pipeaudit.report.run_facts import (  # noqa: I001
    m_text,
    PIPELINE_COLUMNS,
    bubble_title,
    fact_lines,
    job_lines,
    one_process,
    pipeline_rows,
    shape_text,
)
from pipeaudit.report.step_view import timeline_caption

_SEV_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}
_SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}
#: findings the default report shows (the most severe first); --verbose shows all
TOP_FINDINGS = 4
#: findings about the input itself, shown whatever their rank: every figure rests on them
ABOUT_THE_INPUT = frozenset({"TRUNCATED_TRACE", "PARTIAL_TRACE", "MISSING_RANKS"})


def render_analyze_text(result: AuditResult, *, timeline_text: str = "",
                        timeline_step: int | None = None, color: bool | None = None,
                        width: int = 120, verbose: bool = False) -> str:
    """:func:`render_terminal` as text."""
    import io

    buf = io.StringIO()
    render_terminal(result, buf, timeline_text=timeline_text, timeline_step=timeline_step,
                    color=color, width=width, verbose=verbose)
    return buf.getvalue()


def render_terminal(result: AuditResult, out: TextIO, *, timeline_text: str = "",
                    timeline_step: int | None = None, color: bool | None = None,
                    width: int = 120, verbose: bool = False) -> None:
    """Write the human report of ``result`` to ``out`` (``verbose``: all of it)."""
    con = Console(file=out, force_terminal=color, no_color=color is False, width=width,
                  highlight=False, soft_wrap=False)
    _header(con, result)
    if result.pipeline_found:
        _summary(con, result, verbose)
        _pipelines(con, result)
        if verbose:
            _stages(con, result)
    if verbose or not result.pipeline_found:
        _ranks(con, result)
    if timeline_text:
        caption = timeline_caption(result, timeline_step) if timeline_step is not None else ""
        heading = f"\n[bold]Timeline of step {timeline_step}[/]"
        con.print(heading + (f" ({caption})" if caption else ""), soft_wrap=True)
        con.print(timeline_text, markup=False, soft_wrap=True)
    _findings(con, result, None if verbose else TOP_FINDINGS)
    if verbose:
        for n in result.notes:
            _say(con, f"note: {n}", style="dim")
    else:
        _more(con, result)


def _more(con: Console, r: AuditResult) -> None:
    """The one line saying what --verbose adds."""
    left = len(r.findings) - len(_top(r.findings, TOP_FINDINGS))
    parts = ([f"{left} more finding{'s' if left != 1 else ''}"] if left else []) + (
        [f"{len(r.notes)} note{'s' if len(r.notes) != 1 else ''}"] if r.notes else [])
    if r.pipeline_found:
        parts.append("stage and rank tables, the published formulas")
    con.print(f"\n--verbose adds {', '.join(parts)}; --html FILE writes it all as a page"
              if parts else "", style="dim", markup=False, soft_wrap=True)


def _header(con: Console, r: AuditResult) -> None:
    con.print("[bold]pipeaudit analyze[/]  " + escape(inputs_line(r.inputs)), markup=True)
    if not r.pipeline_found:
        con.print(f"{r.num_ranks} rank(s), device {r.device_type}: no pipeline actions found; "
                  "per-rank busy/idle/communication below.")
        return
    sched = r.schedule or "unknown"
    how = {"declared": "declared", "manifest": "from manifest", "detected": "detected from order",
           "unknown": "not recognised", "uncertain": "not read: see READING_UNCERTAIN"}[r.schedule_source]
    con.print(f"schedule [bold]{sched}[/] ({how}); {escape(shape_text(r))}, M={m_text(r)} "
              f"microbatches, {r.num_steps} step(s), device {r.device_type}")
    for line in fact_lines(r):
        con.print(hanging(line, width=con.width), markup=False,
                  style="yellow" if line.startswith(("actions", "ranks", "UNCERTAIN")) else None)


def _summary(con: Console, r: AuditResult, verbose: bool) -> None:
    b = r.bubble
    t = table(title=bubble_title(r))
    for c in ("measured", "theory", "formula", "replay ideal", "imbalance part", "overhead part",
              "median step"):
        t.add_column(c, justify="right")
    t.add_row(pct(b.measured), pct(b.theory), b.theory_formula or "-", pct(b.replay_ideal),
              pct(b.imbalance_part), pct(b.overhead_part), f"{ms(r.step_time_us)} ms")
    print_table(con, t)
    if not verbose:
        con.print("imbalance part = replay ideal - theory (uneven stages, F/B/W durations); "
                  "overhead part = measured - replay ideal", style="dim")
        return
    _say(con, "imbalance part = replay ideal - theory (uneven stages, F/B/W durations); "
         "overhead part = measured - replay ideal (communication, waits, host overhead)", style="dim")
    if b.theory is not None:
        _say(con, "theory = the per-step figure at the measured mean T_F, T_B, T_W (closed form, "
             "or a replay of the schedule's order where none holds)", style="dim")
        for line in published_lines(b.published) or [NO_PUBLISHED]:
            _say(con, line)


def _pipelines(con: Console, r: AuditResult) -> None:
    if len(r.pipelines) < 2:
        return
    t = table(title="Pipeline replicas (the job's step is its slowest replica's)")
    for c in PIPELINE_COLUMNS:
        t.add_column(c, justify="right")
    for row in pipeline_rows(r):
        t.add_row(*row)
    print_table(con, t)
    for line in job_lines(r):
        _say(con, line)


def _stages(con: Console, r: AuditResult) -> None:
    t = table(title="Stages (mean compute per action, ms; in-flight = peak microbatches held"
                    + ("; recvs over the whole trace: waiting for the sender vs transfer, ms"
                       if _has_recvs(r) else "") + ")")
    replicas = len(r.pipelines) > 1
    recvs = _has_recvs(r)
    for c in (("pipe",) if replicas else ()) + ("stage", "rank", "F", "B", "I", "W", "F ms", "B ms",
                                                "I ms", "W ms", "in-flight", "expected") + (
            ("recv wait", "recv transfer") if recvs else ()):
        t.add_column(c, justify="right")
    for s in r.stages:
        t.add_row(*((str(s.pipeline),) if replicas else ()), str(s.stage), str(s.rank),
                  *(str(s.actions[k]) for k in "FBIW"),
                  *(ms(s.mean_compute_us[k]) if s.actions[k] else "-" for k in "FBIW"),
                  str(s.peak_inflight),
                  "-" if s.expected_peak_inflight is None else str(s.expected_peak_inflight),
                  *((ms(s.recv_wait_us), ms(s.recv_transfer_us)) if recvs else ()))
    print_table(con, t)


def _has_recvs(r: AuditResult) -> bool:
    return any(s.recv_wait_us is not None for s in r.stages)


def _ranks(con: Console, r: AuditResult) -> None:
    if not r.pipeline_found:
        t = table(title="Ranks (whole trace; times in ms; busy = compute or communication running)")
        for c in ("rank", "device", "span", "busy", "idle", "comm", "exposed comm", "overlap",
                  "peak MiB"):
            t.add_column(c, justify="right")
        for x in r.ranks:
            t.add_row(str(x.rank), x.device_type, ms(x.span_us), ms(x.busy_us), pct(x.idle_fraction),
                      ms(x.comm_us), ms(x.exposed_comm_us), pct(x.overlap),
                      mib(x.peak_allocated_bytes))
        print_table(con, t)
        return
    t = table(title="Ranks (times in ms; compute/window over audited steps, comm/idle over the "
                    "whole trace)")
    replicas = len(r.pipelines) > 1
    for c in ("rank",) + (("pipe",) if replicas else ()) + (
            "stages", "bubble", "replay", "idle", "compute", "window", "comm", "exposed",
            "overlap", "peak MiB"):
        t.add_column(c, justify="right")
    for x in r.ranks:
        t.add_row(str(x.rank), *((str(x.pipeline),) if replicas else ()),
                  ",".join(map(str, x.stages)) or "-", pct(x.bubble),
                  pct(x.replay_bubble), pct(x.idle_fraction), ms(x.compute_us), ms(x.window_us),
                  ms(x.comm_us), ms(x.exposed_comm_us), pct(x.overlap),
                  mib(x.peak_allocated_bytes))
    print_table(con, t)


def _top(findings: list, top: int) -> list:
    """The ``top`` most severe findings and those about the input, in the report's order."""
    ranked = sorted(range(len(findings)), key=lambda i: _SEVERITY_ORDER.get(findings[i].severity, 3))
    keep = set(ranked[:top]) | {i for i, f in enumerate(findings) if f.code in ABOUT_THE_INPUT}
    return [f for i, f in enumerate(findings) if i in keep]


def _findings(con: Console, r: AuditResult, top: int | None) -> None:
    if not r.findings:
        con.print("\n[green]No findings: the run matches its schedule's theory.[/]")
        return
    shown = r.findings if top is None else _top(r.findings, top)
    more = "" if len(shown) == len(r.findings) else f", the {len(shown)} most severe"
    con.print(f"\n[bold]Findings ({len(r.findings)}{more})[/]")
    for f in shown:
        where = finding_where(f, " ", one_process(r))
        vals = finding_values(f)
        con.print(f"[{_SEV_STYLE.get(f.severity, '')}]{f.severity.upper():7}[/] {f.code}"
                  f"{' ' + where if where else ''}{vals}")
        con.print(hanging(f.message, indent=8, hang=0, width=con.width), markup=False)


def _say(con: Console, text: str, **kwargs) -> None:
    """One line of prose, wrapped with a hanging indent at the console's width."""
    lead = len(text) - len(text.lstrip(" "))
    con.print(hanging(text.strip(), indent=lead, hang=HANG, width=con.width), markup=False,
              highlight=False, **kwargs)
