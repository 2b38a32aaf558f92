"""Text reporter of a sweep: one table row per grid point, then why points were skipped or failed."""

from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table

from pipeaudit.report.formatting import mib, ms, pct
from pipeaudit.sweep.results import SweepResult

_STATUS_STYLE = {"ok": "green", "skipped": "dim", "failed": "bold red"}


def render_text(result: SweepResult, *, color: bool = False, width: int = 160) -> str:
    """The sweep table (rich) followed by the skip/fail reasons, as text."""
    buf = io.StringIO()
    con = Console(file=buf, force_terminal=color, no_color=not color, width=width, highlight=False,
                  soft_wrap=False)
    o = result.options
    m = o.get("model") or {}
    con.print(f"[bold]pipeaudit sweep[/]  {len(result.records)} point(s); model {m.get('layers')} layers "
              f"x {m.get('hidden')} hidden, {o.get('steps')} profiled step(s) after "
              f"{o.get('warmup_steps')} warm-up")
    t = Table(title="Measured vs theory (bubble = fraction of the step, mean over ranks and steps)",
              title_justify="left")
    for c in ("run", "status", "P", "M", "v", "measured", "theory", "published", "replay ideal",
              "step ms", "samples/s", "peak MiB", "in-flight", "findings"):
        t.add_column(c, justify="left" if c in ("run", "status", "findings") else "right",
                     no_wrap=c != "findings", min_width=26 if c == "findings" else None,
                     overflow="fold")
    for r in result.records:
        inflight = "-" if r.peak_inflight is None else (
            f"{r.peak_inflight}/{r.expected_peak_inflight}" if r.expected_peak_inflight is not None
            else str(r.peak_inflight))
        t.add_row(r.key, f"[{_STATUS_STYLE.get(r.status, '')}]{r.status}[/]", str(r.stages),
                  str(r.microbatches), str(r.chunks), pct(r.measured_bubble), pct(r.theory_bubble),
                  pct(r.published_bubble), pct(r.replay_ideal), ms(r.step_time_us),
                  "-" if r.throughput_samples_s is None else f"{r.throughput_samples_s:.1f}",
                  mib(r.peak_memory_bytes), inflight, ", ".join(r.findings) or "-")
    con.print(t)
    formulas = sorted({f"{r.schedule}: {r.theory_formula}" for r in result.records if r.theory_formula})
    if formulas:
        con.print("theory (the per-step closed form): " + "; ".join(formulas), markup=False)
    sources = sorted({f"{r.schedule}: {r.published_formula}" for r in result.records
                      if r.published_formula})
    if sources:
        con.print("published (the source's formula at the measured durations): "
                  + "; ".join(sources), markup=False)
    con.print("in-flight = measured peak microbatches held by a stage / the schedule's peak",
              markup=False)
    for r in result.records:
        if r.status != "ok":
            con.print(f"{r.status} {r.key}: {r.reason}", markup=False)
    return buf.getvalue()
