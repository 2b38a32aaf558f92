"""Every microbatch has each of its actions once per stage and step."""

from __future__ import annotations

from collections import Counter

import polars as pl

from pipeaudit.audit import findings as F
from pipeaudit.audit.result import Finding
from pipeaudit.timeline.model import Timeline


def completeness_findings(tl: Timeline, stages, wb) -> list[Finding]:
    """Each microbatch needs one F and one backward (a B, or an I with its W) per stage and step."""
    acts = tl.actions
    M = int(acts["microbatch"].max()) + 1
    out = []
    for st in stages:
        a = acts.filter(pl.col("stage") == st.stage)
        has_w = st.actions["W"] > 0
        per_step: dict[int, list[tuple]] = {}
        for k, kind, m in a.select("step", "kind", "microbatch").iter_rows():
            per_step.setdefault(k, []).append((kind, int(m)))
        for k in sorted(wb):
            c = Counter(per_step.get(k, []))
            missing, dups = [], []
            for m in range(M):
                if c[("F", m)] == 0:
                    missing.append(f"{st.stage}F{m}")
                if c[("B", m)] + c[("I", m)] == 0:
                    missing.append(f"{st.stage}B{m}")
                if has_w and c[("I", m)] and not c[("W", m)]:
                    missing.append(f"{st.stage}W{m}")
            dups = sorted(f"{st.stage}{kind}{m}" for (kind, m), n in c.items() if n > 1)
            if missing:
                out.append(F.missing_actions(st.stage, st.rank, k, missing))
            if dups:
                out.append(F.duplicated_actions(st.stage, st.rank, k, dups))
    return out
