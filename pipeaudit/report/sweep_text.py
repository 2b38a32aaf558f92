"""Text reporter of a sweep: one table row per grid point (the run's key names its P, M and v),
the runs each finding was raised on, then why points were skipped or failed."""

from __future__ import annotations

import io

from pipeaudit.report.fit import WIDTH, console, hanging, print_table, table
from pipeaudit.report.formatting import mib, ms, pct
from pipeaudit.sweep.results import SweepResult

_STATUS_STYLE = {"ok": "green", "skipped": "dim", "failed": "bold red"}


def render_text(result: SweepResult, *, color: bool = False, width: int = WIDTH) -> str:
    """The sweep table followed by the skip/fail reasons, as text of at most ``width``
    columns (the findings column and long lines wrap)."""
    buf = io.StringIO()
    con = console(buf, color=color, width=width)
    say = lambda text: con.print(hanging(text, width=width), markup=False)  # noqa: E731
    o = result.options
    m = o.get("model") or {}
    con.print(f"[bold]pipeaudit sweep[/]  {len(result.records)} point(s); model {m.get('layers')} layers "
              f"x {m.get('hidden')} hidden, {o.get('steps')} profiled step(s) after "
              f"{o.get('warmup_steps')} warm-up")
    t = table(title="Measured vs theory (bubbles as a fraction of the step; ideal = the replay "
                    "ideal; MiB = peak memory)")
    for c in ("run", "status", "measured", "theory", "published", "ideal", "step ms",
              "samples/s", "MiB", "in-flight", "findings"):
        t.add_column(c, justify="left" if c in ("run", "status") else "right", no_wrap=True)
    for r in result.records:
        inflight = "-" if r.peak_inflight is None else (
            f"{r.peak_inflight}/{r.expected_peak_inflight}" if r.expected_peak_inflight is not None
            else str(r.peak_inflight))
        t.add_row(r.key, f"[{_STATUS_STYLE.get(r.status, '')}]{r.status}[/]",
                  pct(r.measured_bubble), pct(r.theory_bubble),
                  pct(r.published_bubble), pct(r.replay_ideal), ms(r.step_time_us),
                  "-" if r.throughput_samples_s is None else f"{r.throughput_samples_s:.1f}",
                  mib(r.peak_memory_bytes), inflight, str(len(r.findings)) if r.status == "ok" else "-")
    print_table(con, t)
    codes = sorted({code for r in result.records for code in r.findings})
    for code in codes:
        say(f"{code}: " + ", ".join(r.key for r in result.records if code in r.findings))
    formulas = sorted({f"{r.schedule}: {r.theory_formula}" for r in result.records if r.theory_formula})
    if formulas:
        say("theory (the per-step closed form): " + "; ".join(formulas))
    sources = sorted({f"{r.schedule}: {r.published_formula}" for r in result.records
                      if r.published_formula})
    if sources:
        say("published (the source's formula at the measured durations): " + "; ".join(sources))
    con.print("in-flight = measured peak microbatches held by a stage / the schedule's peak",
              markup=False)
    for r in result.records:
        if r.status != "ok":
            say(f"{r.status} {r.key}: {r.reason}")
    return buf.getvalue()
