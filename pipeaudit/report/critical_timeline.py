"""ASCII timeline of one step with its critical path marked under each rank.

Uses :func:`pipeaudit.report.ascii_timeline.render` for the action rows and adds one marker
line under each rank with the same cells: ``#`` critical compute, ``~`` a communication wait
on the path, ``:`` a host/launch gap on the path.
"""

from __future__ import annotations

from pipeaudit.explain.critical import COMM, COMPUTE, CriticalPath
from pipeaudit.report.ascii_timeline import render
from pipeaudit.report.step_view import step_items
from pipeaudit.timeline.model import Timeline

MARKS = {COMPUTE: "#", COMM: "~"}
LEGEND = "under each rank: # critical compute, ~ communication wait, : host/launch gap"


def critical_timeline(tl: Timeline, path: CriticalPath, width: int = 96) -> str:
    """The step's actions per rank, each rank followed by its critical-path marks."""
    items = step_items(tl, path.step)
    rows = sorted({i.row for i in items})
    if not items:
        return "(no actions)"
    t0 = float(path.window_start_ns)
    t1 = t0 + path.step_time_us * 1000.0
    cell = max(t1 - t0, 1e-12) / width

    def marks(r: int, name_w: int) -> list[str]:
        row = [" "] * width
        for it in path.items:
            if it.rank != r or it.end_us <= it.start_us:
                continue
            a = (it.start_us * 1000.0) / cell
            b = (it.end_us * 1000.0) / cell
            c0 = max(0, min(width - 1, int(a)))
            c1 = min(width, max(c0 + 1, int(round(b))))
            for c in range(c0, c1):
                row[c] = MARKS.get(it.what, ":")
        return [" " * name_w + "|" + "".join(row) + "|"]

    return render(items, rows, width=width, t0=t0, t1=t1, unit="ms", scale=1e-6, marks=marks)
