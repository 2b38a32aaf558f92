"""Every microbatch has each of its actions once per stage, rank and step."""

from __future__ import annotations

from collections import Counter

import polars as pl

from pipeaudit.audit import findings as F
from pipeaudit.audit.result import Finding
from pipeaudit.timeline.model import Timeline


def completeness_findings(tl: Timeline, stages, steps) -> list[Finding]:
    """Each microbatch needs one F and one backward (a B, or an I with its W) per stage and step,
    on every rank that runs the stage (tensor-parallel peers each run it)."""
    acts = tl.actions
    if acts.height == 0:
        return []
    M = int(acts["microbatch"].max()) + 1
    has_w = {st.stage: st.actions["W"] > 0 for st in stages}
    out = []
    for rt in tl.ranks:
        for stage in sorted(int(s) for s in rt.actions["stage"].unique().to_list()):
            a = rt.actions.filter(pl.col("stage") == stage)
            per_step: dict[int, list[tuple]] = {}
            for k, kind, m in a.select("step", "kind", "microbatch").iter_rows():
                per_step.setdefault(k, []).append((kind, int(m)))
            for k in sorted(steps):
                c = Counter(per_step.get(k, []))
                missing = []
                for m in range(M):
                    if c[("F", m)] == 0:
                        missing.append(f"{stage}F{m}")
                    if c[("B", m)] + c[("I", m)] == 0:
                        missing.append(f"{stage}B{m}")
                    if has_w.get(stage) and c[("I", m)] and not c[("W", m)]:
                        missing.append(f"{stage}W{m}")
                dups = sorted(f"{stage}{kind}{m}" for (kind, m), n in c.items() if n > 1)
                if missing:
                    out.append(F.missing_actions(stage, rt.rank, k, missing))
                if dups:
                    out.append(F.duplicated_actions(stage, rt.rank, k, dups))
    return out
