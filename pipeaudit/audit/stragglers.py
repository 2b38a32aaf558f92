"""Ranks that start their actions late: after their inputs and the rank itself were ready.

An action is ready when the rank finished its previous action of the step and every action
it consumes (:func:`pipeaudit.audit.deps.producers`) finished, wherever it ran; the time it
started after that is its delay. An action whose producer ran on a rank without a trace has
no known ready time and is not counted: a rank's figure does not change when another rank's
trace is left out.

Computed over every action of the audited steps at once, on the timeline's sorted action
columns (:mod:`pipeaudit.timeline.columns`): a producer's end is looked up by its (step,
stage, kind, microbatch) key with a binary search.
"""

from __future__ import annotations

from statistics import median

import numpy as np

from pipeaudit.audit import findings as F
from pipeaudit.audit.result import Finding
from pipeaudit.timeline.columns import B_CODE, F_CODE, I_CODE, W_CODE
from pipeaudit.timeline.model import Timeline

US = 1000.0  # ns per µs


def straggler_findings(tl: Timeline, steps, S: int) -> list[Finding]:
    """Per rank, time its actions started after their inputs and the rank were ready
    (``steps``: the audited StepMetrics). None where the stages take turns on one device (a
    single-process run): a stage whose inputs are ready waits for the device, not for its host."""
    if tl.shared_device is not None:
        return []
    delays = rank_delays(tl, [s.step for s in steps], S)
    if len(delays) < 3:
        return []
    nsteps = max(len(steps), 1)
    per_step = {r: d / nsteps for r, d in delays.items()}
    step_us = sum(s.step_time_us for s in steps) / nsteps
    out = []
    for r, d in per_step.items():
        others = [x for rr, x in per_step.items() if rr != r]
        f = F.straggler(r, d, median(others), step_us)
        if f:
            out.append(f)
    return out


def rank_delays(tl: Timeline, steps: list[int], S: int) -> dict[int, float]:
    """Rank -> its actions' delays summed over ``steps`` (µs), for the ranks with at least
    one action whose ready time is known."""
    a = tl.action_arrays()
    if a.size == 0 or not steps:
        return {}
    sel = np.flatnonzero(np.isin(a.step, np.asarray(steps, dtype=np.int64)))
    if sel.size == 0:
        return {}
    ri, step, stage = a.rank_index[sel], a.step[sel], a.stage[sel]
    kind, mb = a.kind[sel].astype(np.int64), a.microbatch[sel]
    cs, ce = a.compute_start[sel], a.compute_end[sel]
    # the end of each (step, stage, kind, microbatch): its last row (ranks in timeline order)
    n_st, n_mb = int(max(stage.max(), S)) + 2, int(mb.max()) + 1

    def key(k, s, kd, m):
        return ((k - step.min()) * n_st + (s + 1)) * 4 * n_mb + kd * n_mb + m

    keys = key(step, stage, kind, mb)
    rev = keys[::-1]
    uniq, first_in_rev = np.unique(rev, return_index=True)
    last_end = ce[::-1][first_in_rev]

    def end_of(k, s, kd, m, valid):
        """(found, end) of producer keys (rows where ``valid``)."""
        q = key(k, s, kd, m)
        j = np.minimum(np.searchsorted(uniq, q), uniq.size - 1)
        found = valid & (uniq[j] == q)
        return found, np.where(found, last_end[j], 0)

    # the rank's previous action of the step
    same = np.zeros(sel.size, dtype=bool)
    same[1:] = (ri[1:] == ri[:-1]) & (step[1:] == step[:-1])
    prev_end = np.concatenate([[0], ce[:-1]])
    ready_known = same.copy()
    ready = np.where(same, prev_end, np.iinfo(np.int64).min)
    present = np.zeros(n_st + 1, dtype=bool)
    present[np.asarray(sorted(a.stages_present), dtype=np.int64) + 1] = True
    skip = np.zeros(sel.size, dtype=bool)
    is_f, is_w = kind == F_CODE, kind == W_CODE
    is_bi = (kind == B_CODE) | (kind == I_CODE)
    deps: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (valid, stage, kind)
    # F(s, m) needs F(s-1, m)
    has_up = is_f & (stage > 0)
    deps.append((has_up, stage - 1, np.full(sel.size, F_CODE)))
    # W(s, m) needs I(s, m)
    deps.append((is_w, stage, np.full(sel.size, I_CODE)))
    # B/I(s, m) needs F(s, m) and B(s+1, m) or I(s+1, m)
    deps.append((is_bi, stage, np.full(sel.size, F_CODE)))
    down = is_bi & (stage < S - 1)
    deps.append((down, stage + 1, np.full(sel.size, B_CODE)))
    deps.append((down, stage + 1, np.full(sel.size, I_CODE)))
    for valid, s, kd in deps:
        skip |= valid & ~present[np.clip(s, -1, n_st - 1) + 1]
        found, end = end_of(step, s, kd, mb, valid)
        ready = np.where(found & (~ready_known | (end > ready)), end, ready)
        ready_known |= found
    counted = ready_known & ~skip
    delay = np.where(counted, np.maximum(0, cs - ready), 0) / US
    # sum per rank in the order the actions ran (step by step), as a running sum does
    out: dict[int, float] = {}
    order = np.lexsort((np.arange(sel.size), ri))
    ri_o, d_o, c_o = ri[order], delay[order], counted[order]
    cut = np.flatnonzero(np.diff(ri_o)) + 1
    for lo, hi in zip(np.concatenate([[0], cut]).tolist(), np.concatenate([cut, [ri_o.size]]).tolist()):
        mask = c_o[lo:hi]
        if mask.any():
            out[tl.ranks[int(ri_o[lo])].rank] = float(np.cumsum(d_o[lo:hi][mask])[-1])
    return out
