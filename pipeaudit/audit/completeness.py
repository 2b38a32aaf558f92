"""Every microbatch has each of its actions once per stage, rank and step.

Counted for every (rank, stage, step, kind, microbatch) at once on the timeline's action
columns (:mod:`pipeaudit.timeline.columns`); only the places where an action is missing or
repeated are looked at one by one, to word the finding.
"""

from __future__ import annotations

import numpy as np

from pipeaudit.actions import KINDS
from pipeaudit.audit import findings as F
from pipeaudit.audit.result import Finding
from pipeaudit.timeline.columns import B_CODE, F_CODE, I_CODE, W_CODE
from pipeaudit.timeline.model import Timeline


def completeness_findings(tl: Timeline, stages, steps) -> list[Finding]:
    """Each microbatch needs one F and one backward (a B, or an I with its W) per stage and step,
    on every rank that runs the stage (tensor-parallel peers each run it)."""
    a = tl.action_arrays()
    if a.size == 0:
        return []
    M = int(a.microbatch.max()) + 1
    has_w = {st.stage: st.actions["W"] > 0 for st in stages}
    steps = sorted(steps)
    if not steps:
        return []
    step_list = np.asarray(steps, dtype=np.int64)
    out = []
    for i, rt in enumerate(tl.ranks):
        rows = np.arange(*np.searchsorted(a.rank_index, [i, i + 1]))  # rows are by rank
        if rows.size == 0:
            continue
        r_stage, r_step = a.stage[rows], a.step[rows]
        r_kind, r_mb = a.kind[rows].astype(np.int64), a.microbatch[rows]
        pos = np.searchsorted(step_list, r_step)
        pos_c = np.minimum(pos, step_list.size - 1)
        audited = step_list[pos_c] == r_step
        for stage in np.unique(r_stage).tolist():
            on = audited & (r_stage == stage)
            counts = np.zeros((step_list.size, M, 4), dtype=np.int64)
            np.add.at(counts, (pos_c[on], r_mb[on], r_kind[on]), 1)
            f, b, i_, w = (counts[:, :, c] for c in (F_CODE, B_CODE, I_CODE, W_CODE))
            missing_f = f == 0
            missing_b = (b + i_) == 0
            missing_w = (i_ > 0) & (w == 0) if has_w.get(stage) else np.zeros_like(missing_f)
            bad = missing_f | missing_b | missing_w
            dup = (counts > 1).any(axis=2)
            for si in np.flatnonzero(bad.any(axis=1) | dup.any(axis=1)).tolist():
                k = int(step_list[si])
                missing = []
                for m in np.flatnonzero(bad[si]).tolist():
                    if missing_f[si, m]:
                        missing.append(f"{stage}F{m}")
                    if missing_b[si, m]:
                        missing.append(f"{stage}B{m}")
                    if missing_w[si, m]:
                        missing.append(f"{stage}W{m}")
                dups = sorted(f"{stage}{KINDS[c]}{m}" for m, c in zip(*np.nonzero(counts[si] > 1)))
                if missing:
                    out.append(F.missing_actions(stage, rt.rank, k, missing))
                if dups:
                    out.append(F.duplicated_actions(stage, rt.rank, k, dups))
    return out
