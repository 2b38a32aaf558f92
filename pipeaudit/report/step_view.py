"""Pick a representative step and turn its actions into timeline items."""

from __future__ import annotations

import polars as pl

from pipeaudit.audit.result import AuditResult
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
    return (f"{own:.2f} ms; of the two middle steps by time, the shorter: the median step "
            f"time, {median / 1000.0:.2f} ms, is their mean")


def _multi_stage(tl: Timeline) -> bool:
    """True when some rank holds several stages (then labels carry the stage)."""
    return any(r.actions.height and r.actions["stage"].n_unique() > 1 for r in tl.ranks)


def step_items(tl: Timeline, step: int) -> list[Item]:
    """One item per action of ``step``: from its first to its last compute, labelled in the
    timeline notation (``F3``, or ``2F3`` when a rank holds several stages)."""
    multi = _multi_stage(tl)
    a = tl.actions.filter(pl.col("step") == step)
    items = []
    for rank, stage, kind, mb, cs, ce in a.select(
            "rank", "stage", "kind", "microbatch", "compute_start", "compute_end").iter_rows():
        if ce <= cs:
            continue  # nothing computed (e.g. torch's I on stage 0: the input needs no gradient)
        label = action_label(kind, mb, int(stage) if multi else None)
        items.append(Item(int(rank), float(cs), float(max(ce, cs)), label))
    return items


def legend(tl: Timeline) -> str:
    """How to read the timeline's labels."""
    return notation(_multi_stage(tl))


def step_timeline_text(tl: Timeline, result: AuditResult, width: int = 96) -> tuple[int | None, str]:
    """(step, ASCII timeline) of the median step."""
    k = median_step(result)
    if k is None:
        return None, ""
    items = step_items(tl, k)
    rows = sorted({r.rank for r in tl.ranks if r.actions.height})
    return k, legend(tl) + "\n" + render(items, rows, width=width, unit="ms", scale=1e-6)
