"""Pick a representative step and turn its actions into timeline items."""

from __future__ import annotations

import polars as pl

from pipeaudit.audit.result import AuditResult
from pipeaudit.report.ascii_timeline import Item, render
from pipeaudit.timeline.model import Timeline


def median_step(result: AuditResult) -> int | None:
    """The step whose time is the median (the one a reader should look at)."""
    if not result.steps:
        return None
    ordered = sorted(result.steps, key=lambda s: s.step_time_us)
    return ordered[(len(ordered) - 1) // 2].step


def step_items(tl: Timeline, step: int) -> list[Item]:
    """One item per action of ``step``: from its first to its last compute, labelled F3 or 2F3."""
    multi = any(r.actions["stage"].n_unique() > 1 for r in tl.ranks if r.actions.height)
    a = tl.actions.filter(pl.col("step") == step)
    items = []
    for rank, stage, kind, mb, cs, ce in a.select(
            "rank", "stage", "kind", "microbatch", "compute_start", "compute_end").iter_rows():
        label = f"{stage}{kind}{mb}" if multi else f"{kind}{mb}"
        items.append(Item(int(rank), float(cs), float(max(ce, cs)), label))
    return items


def step_timeline_text(tl: Timeline, result: AuditResult, width: int = 96) -> tuple[int | None, str]:
    """(step, ASCII timeline) of the median step."""
    k = median_step(result)
    if k is None:
        return None, ""
    items = step_items(tl, k)
    rows = sorted({r.rank for r in tl.ranks if r.actions.height})
    return k, render(items, rows, width=width, unit="ms", scale=1e-6)
