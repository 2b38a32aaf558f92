"""Text reporter of Holistic Trace Analysis's figures next to pipeaudit's (``--with-hta``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeaudit.report.fit import fit, render, table
from pipeaudit.report.formatting import pct

if TYPE_CHECKING:  # types only
    from pipeaudit.integrations.hta import HtaComparison


def render_text(cmp: "HtaComparison") -> str:
    """The small side-by-side table, as plain text in the reports' one table style."""
    t = table(title="HTA alongside (GPU idle = 1 - |union of kernels, memcpy, memset| / span)")
    for c in ("rank", "pipeaudit idle", "idle (HTA steps)", "HTA idle", "pipeaudit overlap",
              "HTA comm/comp overlap"):
        t.add_column(c, justify="right")
    t.add_column("HTA steps", justify="left")
    for r in cmp.rows:
        t.add_row(str(r.rank), pct(r.pipeaudit_idle), pct(r.pipeaudit_idle_hta_steps), pct(r.hta_idle),
                  pct(r.pipeaudit_overlap), pct(r.hta_overlap), r.hta_steps)
    return fit("\n".join([
        render(t), f"HTA: {cmp.message}",
        "pipeaudit idle covers the whole trace; HTA drops the last ProfilerStep (and rounds "
        "ns-resolution events inward to whole µs). pipeaudit overlap counts communication "
        "kernels and nccl/gloo spans under any compute; HTA's counts communication kernels "
        "under computation kernels only. See docs/hta.md."])) + "\n"
