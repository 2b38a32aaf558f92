"""HTML reporter: one self-contained file (styles, script and data inlined; nothing fetched).

The page holds the summary, findings, per-stage and per-rank tables rendered here, and a JSON
blob that the inlined script (``assets/report.js``, hand-written, no library) draws as SVG:
the timeline of a step (measured next to its replay ideal; hover shows action, compute and
span), bubble per rank (measured, replay ideal, theory), memory over time per rank and
in-flight microbatches per stage. After drawing, the script sets ``data-rendered="ok"`` on
``<body>``; a script error is recorded in ``data-error`` and shown on the page.

The template is :mod:`string.Template` (``assets/report.html``): no template engine needed
for one page with a handful of slots.
"""

from __future__ import annotations

import html
import json
import math
from importlib import resources
from string import Template
from typing import Any

from pipeaudit import __version__
from pipeaudit.audit.result import AuditResult
from pipeaudit.report import palette
from pipeaudit.report.action_parts import coarse, compute_parts
from pipeaudit.report.formatting import finding_values, finding_where, inputs_line, mib, ms, pct
from pipeaudit.report.series import (
    device_label,
    downsample,
    ideal_actions,
    inflight_series,
    memory_series,
    run_origin,
    step_windows,
)
from pipeaudit.report.published_text import published_lines, published_value
from pipeaudit.report.step_view import median_step
from pipeaudit.timeline.model import Timeline

MAX_MEMORY_POINTS = 1500
#: the finest detail of an action's compute the timeline keeps: a step's window over this many
#: parts (gaps in an action's compute shorter than one are closed)
PIXELS_PER_STEP = 2000
MAX_STEPS_DRAWN = 16


def _asset(name: str) -> str:
    return resources.files("pipeaudit.report").joinpath("assets", name).read_text(encoding="utf-8")


def _ms(ns: float) -> float:
    return round(ns / 1e6, 4)


def report_data(tl: Timeline, result: AuditResult) -> dict[str, Any]:
    """What the page's script draws, as plain JSON-able data (times in ms)."""
    origin = run_origin(tl)
    windows = step_windows(tl)
    med = median_step(result)
    steps_meta = {s.step: s for s in result.steps}
    chosen = sorted(windows)
    if len(chosen) > MAX_STEPS_DRAWN:  # keep the median step and the first ones
        keep = set(chosen[:MAX_STEPS_DRAWN - 1]) | ({med} if med is not None else set())
        chosen = sorted(keep)
    steps = []
    for k in chosen:
        lo, hi = windows[k]
        acts = tl.actions.filter(tl.actions["step"] == k)
        parts = compute_parts(tl, k)
        min_gap = max(1, (hi - lo) // PIXELS_PER_STEP)
        rows = []
        for r, s, kind, mb, st, en, cns, cs, ce in acts.select(
                "rank", "stage", "kind", "microbatch", "start", "end", "compute_ns",
                "compute_start", "compute_end").iter_rows():
            # where it computes, at the drawing's resolution: the rest of its span is waiting
            busy = [[_ms(a - lo), _ms(b - lo)]
                    for a, b in coarse(parts.get((s, kind, mb, k), [(cs, max(ce, cs))]), min_gap)]
            rows.append([int(r), int(s), kind, int(mb), _ms(cs - lo), _ms(max(ce, cs) - lo),
                         _ms(cns), _ms(en - st), _ms(st - lo), _ms(en - lo), busy])
        ideal = ideal_actions(tl, k, lo)
        meta = steps_meta.get(k)
        steps.append({
            "step": k, "start_ms": _ms(lo - origin), "window_ms": _ms(hi - lo),
            "bubble": meta.bubble if meta else None,
            "ideal_bubble": meta.replay_ideal if meta else None,
            "ideal_ms": (round(meta.replay_step_time_us / 1000, 4)
                         if meta and meta.replay_step_time_us is not None else None),
            "actions": rows,
            "ideal": None if ideal is None else [
                [a.rank, a.stage, a.kind, a.microbatch, _ms(a.start - lo), _ms(a.end - lo)] for a in ideal],
        })
    memory = []
    for r, devs in memory_series(tl).items():
        for d, (ts, vals) in devs.items():
            t2, v2 = downsample(ts, vals, MAX_MEMORY_POINTS)
            memory.append({"label": f"rank {r}" + (f" {device_label(d)}" if len(devs) > 1 else ""),
                           "t": [_ms(t - origin) for t in t2.tolist()],
                           "v": [round(v / 2**20, 3) for v in v2.tolist()]})
    expected = {s.stage: s.expected_peak_inflight for s in result.stages}
    inflight = [{"label": f"stage {s}", "expected": expected.get(s),
                 "t": [_ms(t - origin) for t, _ in series], "v": [n for _, n in series]}
                for s, series in inflight_series(tl).items()]
    end = max((hi for _, hi in windows.values()), default=origin)
    return {
        "version": __version__,
        "kinds": palette.KIND_COLOURS,
        "colours": {"measured": palette.MEASURED, "theory": palette.THEORY, "ideal": palette.IDEAL,
                    "bubble": palette.BUBBLE, "series": list(palette.SERIES)},
        "ranks": sorted({int(r) for r in tl.actions["rank"].unique().to_list()}) if tl.actions.height else [],
        "median_step": med,
        "steps": steps,
        "bubble": {
            "theory": result.bubble.theory, "formula": result.bubble.theory_formula,
            "published": result.bubble.published,
            "measured": result.bubble.measured, "ideal": result.bubble.replay_ideal,
            "ranks": [{"rank": x.rank, "measured": x.bubble, "ideal": x.replay_bubble}
                      for x in result.ranks if x.bubble is not None],
        },
        "memory": memory,
        "inflight": inflight,
        "run_ms": _ms(end - origin),
    }


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _table(header: list[str], rows: list[list[str]], cls: str = "") -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _summary(r: AuditResult) -> str:
    b = r.bubble
    pub = b.published
    cards = [("measured bubble", pct(b.measured), "mean over ranks and steps"),
             ("theory (per step)", pct(b.theory), b.theory_formula or "no closed form"),
             ("published", published_value(pub),
              f"{pub['formula']} ({pub['source']})" if pub else "the sources state no formula"),
             ("replay ideal", pct(b.replay_ideal), "observed order, measured compute, free comm"),
             ("imbalance part", pct(b.imbalance_part), "ideal - theory: uneven stages, F/B/W"),
             ("overhead part", pct(b.overhead_part), "measured - ideal: comm, waits, host"),
             ("median step", f"{ms(r.step_time_us)} ms", f"{r.num_steps} step(s) audited")]
    note = "".join(f"<p class=\"note\">{_e(line.strip())}</p>" for line in published_lines(pub))
    return '<div class="cards">' + "".join(
        f'<div class="card"><div class="k">{_e(k)}</div><div class="v">{_e(v)}</div>'
        f'<div class="n">{_e(n)}</div></div>' for k, v, n in cards) + "</div>" + note


def _findings(r: AuditResult) -> str:
    from pipeaudit.report.run_facts import one_process

    if not r.findings:
        return "<p>None: the run matches its schedule's theory.</p>"
    items = []
    for f in r.findings:
        where = finding_where(f, one_process=one_process(r))
        vals = finding_values(f).strip().strip("()")
        items.append(f'<li class="finding {_e(f.severity)}"><span class="sev">{_e(f.severity)}</span> '
                     f'<code>{_e(f.code)}</code> <span class="where">{_e(where)}</span> '
                     f'<span class="vals">{_e(vals)}</span><div>{_e(f.message)}</div></li>')
    return '<ul class="findings">' + "".join(items) + "</ul>"


def _stages_table(r: AuditResult) -> str:
    return _table(
        ["stage", "rank", "F", "B", "I", "W", "F ms", "B ms", "I ms", "W ms", "in-flight", "expected"],
        [[str(s.stage), str(s.rank), *(str(s.actions[k]) for k in "FBIW"),
          *(ms(s.mean_compute_us[k]) if s.actions[k] else "-" for k in "FBIW"),
          str(s.peak_inflight),
          str(s.expected_peak_inflight) if s.expected_peak_inflight is not None else "-"]
         for s in r.stages], "num")


def _ranks_table(r: AuditResult) -> str:
    return _table(
        ["rank", "stages", "bubble", "replay", "idle", "compute ms", "window ms", "comm ms",
         "exposed ms", "overlap", "peak MiB"],
        [[str(x.rank), ",".join(map(str, x.stages)) or "-", pct(x.bubble), pct(x.replay_bubble),
          pct(x.idle_fraction), ms(x.compute_us), ms(x.window_us), ms(x.comm_us),
          ms(x.exposed_comm_us), pct(x.overlap), mib(x.peak_allocated_bytes)] for x in r.ranks], "num")


def _header(r: AuditResult) -> str:
    from pipeaudit.report.run_facts import (
        PIPELINE_COLUMNS,
        fact_lines,
        job_lines,
        m_text,
        pipeline_rows,
        shape_text,
        uncertain_text,
    )

    if not r.pipeline_found:
        return (f"<p>{r.num_ranks} rank(s), device {_e(r.device_type)}: no pipeline actions found; "
                "per-rank busy, idle and communication below.</p>")
    how = {"declared": "declared", "manifest": "from manifest", "detected": "detected from order",
           "unknown": "not recognised"}.get(r.schedule_source, r.schedule_source)
    text = (f"Schedule <b>{_e(r.schedule or 'unknown')}</b> ({_e(how)}); {_e(shape_text(r))}, "
            f"M={m_text(r)} microbatches, "
            f"{r.num_steps} step(s), device {_e(r.device_type)}.")
    facts = "".join(f"<li>{_e(line)}</li>" for line in fact_lines(r) + job_lines(r))
    replicas = ""
    if len(r.pipelines) > 1:
        replicas = "<h3>Pipeline replicas</h3>" + _table(list(PIPELINE_COLUMNS), pipeline_rows(r), "num")
    warn = uncertain_text(r)
    banner = f"<p class='uncertain'><b>{_e(warn)}</b></p>" if warn else ""
    return (banner + f"<p>{text}</p>" + (f"<ul class='facts'>{facts}</ul>" if facts else "")
            + replicas)


def _finite(x: Any) -> Any:
    """NaN and infinities become null (JSON has no such numbers)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def _json_for_script(data: dict[str, Any]) -> str:
    text = json.dumps(_finite(data), separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _advise_section(advice) -> str:
    """The ``advise`` table: what to run instead (empty without an advice)."""
    if advice is None:
        return ""
    from pipeaudit.report.advise_text import CANDIDATE_COLUMNS, candidate_rows, summary_lines

    lines = "".join(f"<li>{_e(line.strip())}</li>" for line in summary_lines(advice))
    return ('<section id="advise-section"><h2>What to run instead</h2>'
            '<p class="hint">Every candidate predicted from this run (pipeaudit advise: replayed '
            'step time, bubble, peak memory from the [memory] events); the ones that fit the '
            f'memory cap first, each group by predicted step time.</p><ul class="facts">{lines}'
            f'</ul>{_table(list(CANDIDATE_COLUMNS), candidate_rows(advice, 10), "num")}</section>')


def render_html(tl: Timeline, result: AuditResult, *, title: str | None = None,
                advice=None) -> str:
    """The self-contained HTML report of one run (``advice``: a :class:`pipeaudit.advise.Advice`
    of it, shown as a table)."""
    title = title or "pipeaudit report"
    inputs = inputs_line(result.inputs)
    pipeline = result.pipeline_found
    body = {
        "title": _e(title),
        "inputs": _e(inputs),
        "header": _header(result),
        "summary": _summary(result) if pipeline else "",
        "findings": _findings(result),
        "stages": _stages_table(result) if pipeline else "<p>No stages.</p>",
        "ranks": _ranks_table(result),
        "advise": _advise_section(advice),
        "notes": ("<ul>" + "".join(f"<li>{_e(n)}</li>" for n in result.notes) + "</ul>")
        if result.notes else "<p>None.</p>",
        "version": _e(__version__),
        "css": _asset("report.css"),
        "js": _asset("report.js"),
        "data": _json_for_script(report_data(tl, result)),
    }
    return Template(_asset("report.html")).substitute(body)


def write_html(tl: Timeline, result: AuditResult, path: str, *, title: str | None = None,
               advice=None) -> None:
    """Render the report and write it to ``path`` (atomically, over an existing file)."""
    from pipeaudit.outfiles import write_text_atomic

    write_text_atomic(path, render_html(tl, result, title=title, advice=advice),
                      what="the HTML report")
