"""Pick a representative step and turn its actions into timeline items."""

from __future__ import annotations

import polars as pl

from pipeaudit.audit.result import AuditResult
from pipeaudit.report.action_parts import compute_parts
from pipeaudit.report.ascii_timeline import Item, action_label, render
from pipeaudit.report.ascii_timeline import legend as notation
from pipeaudit.timeline.model import Timeline


def median_step(result: AuditResult) -> int | None:
    """The step whose time is the median (the one a reader should look at)."""
    if not result.steps:
        return None
    ordered = sorted(result.steps, key=lambda s: s.step_time_us)
    return ordered[(len(ordered) - 1) // 2].step


def timeline_caption(result: AuditResult, step: int) -> str:
    """What the timeline of ``step`` shows, with its time: ``the median step, 485.01 ms``;
    with an even number of steps the median time averages the two middle ones, so the step
    drawn (the lower middle one) says both. Empty when ``step`` was not audited."""
    times = {s.step: s.step_time_us for s in result.steps}
    median = result.step_time_us
    if step not in times or median is None:
        return ""
    own = times[step] / 1000.0
    if step != median_step(result):
        return f"{own:.2f} ms"
    if abs(times[step] - median) < 0.5:
        return f"the median step, {own:.2f} ms"
    return (f"{own:.2f} ms, the shorter of the two middle steps; their mean is the median step "
            f"time, {median / 1000.0:.2f} ms")


def _multi_stage(tl: Timeline) -> bool:
    """True when some rank holds several stages (then labels carry the stage)."""
    return any(r.actions.height and r.actions["stage"].n_unique() > 1 for r in tl.ranks)


def step_items(tl: Timeline, step: int) -> list[Item]:
    """One item per action of ``step``: its span with the intervals that compute in it
    (:mod:`pipeaudit.report.action_parts`), labelled in the timeline notation (``F3``, or
    ``2F3`` when a rank holds several stages)."""
    multi = _multi_stage(tl)
    a = tl.actions.filter(pl.col("step") == step)
    parts = compute_parts(tl, step)
    items = []
    for rank, stage, kind, mb, s0, e0, cs, ce in a.select(
            "rank", "stage", "kind", "microbatch", "start", "end", "compute_start",
            "compute_end").iter_rows():
        if ce <= cs:
            continue  # nothing computed (e.g. torch's I on stage 0: the input needs no gradient)
        label = action_label(kind, mb, int(stage) if multi else None)
        compute = tuple((float(s), float(e)) for s, e in parts.get((stage, kind, mb, step), ()))
        items.append(Item(int(rank), float(min(s0, cs)), float(max(e0, ce)), label,
                          compute or ((float(cs), float(ce)),)))
    return items


def legend(tl: Timeline, waits: bool = False) -> str:
    """How to read the timeline's labels (``waits``: and its waiting cells)."""
    return notation(_multi_stage(tl), waits=waits)


def step_timeline_text(tl: Timeline, result: AuditResult, width: int = 108) -> tuple[int | None, str]:
    """(step, ASCII timeline) of the median step."""
    k = median_step(result)
    if k is None:
        return None, ""
    items = step_items(tl, k)
    rows = sorted({r.rank for r in tl.ranks if r.actions.height})
    # one process driving a stage per "rank": its rows are the stages
    row_name = "stage" if len(tl.inputs) == 1 and len(rows) > 1 and not _multi_stage(tl) else "rank"
    t0 = min((c[0][0] for c in (i.compute for i in items)), default=None)
    t1 = max((c[-1][1] for c in (i.compute for i in items)), default=None)
    return k, legend(tl, waits=True) + "\n" + render(items, rows, width=width, t0=t0, t1=t1,
                                                       unit="ms", scale=1e-6, row_name=row_name)
