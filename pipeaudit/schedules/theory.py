"""Closed-form bubble and activation memory of the catalogue schedules.

Every formula here is checked against :func:`pipeaudit.schedules.replay` in
``tests/test_schedules_theory.py``. Bubbles use DESIGN.md's definition: idle share of the step
window [earliest start, latest end] over *all* ranks, averaged over ranks. With equal work per
rank that is ``bubble_time / (busy + bubble_time)``, where ``busy`` is one rank's compute.

Durations are per stage (per chunk when a rank holds v stages). ``T_B`` is a full backward;
schedules that split it run ``I`` (input gradient, the ZB paper's "B") for ``T_I = T_B - T_W``
and ``W`` (weight gradient) for ``T_W``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeaudit.errors import ScheduleError
from pipeaudit.schedules.catalogue import (
    _SPLIT,
    _TWO_CHUNKS,
    build_schedule,
    canonical_name,
    check_config,
)
from pipeaudit.schedules.replay import peak_inflight_of_orders

_UNIFORM = "uniform per-stage durations (every stage's F takes T_F, every B takes T_B), zero communication"


@dataclass(frozen=True)
class Theory:
    """A schedule's closed form: bubble as a fraction of the step (None when there is no
    closed form for these inputs), the bubble-to-compute ratio, per-stage peak in-flight
    microbatches, and the assumptions."""

    bubble: float | None
    formula: str
    ratio: float | None
    ratio_formula: str | None
    peak_inflight: dict[int, int]
    notes: str
    bubble_time: float | None = None
    peak_formula: str = ""
    busy: float = 0.0
    extra: dict[str, float] = field(default_factory=dict)


def theory(
    name: str,
    num_ranks: int,
    num_microbatches: int,
    chunks: int = 1,
    t_f: float = 1.0,
    t_b: float = 2.0,
    t_w: float | None = None,
    t_i: float | None = None,
) -> Theory:
    """Closed-form bubble and peak activation memory of schedule ``name``.

    ``t_f``/``t_b`` are per-stage (per-chunk) forward and full-backward times; ``t_w`` is the
    weight-gradient part for split-backward schedules (default ``t_b / 2``). Measured split
    passes can be given as ``t_i`` and ``t_w`` instead: then ``t_b`` is ignored and taken as
    ``t_i + t_w``. For zbv and dualpipev v is always 2 (``chunks`` 1 or 2 both mean that).
    """
    if t_i is not None:
        if t_w is None:
            raise ScheduleError("theory: t_i needs t_w (the full backward is t_i + t_w)")
        t_b = t_i + t_w
    canon = canonical_name(name)
    P, M = num_ranks, num_microbatches
    v = 2 if canon in _TWO_CHUNKS and chunks in (1, 2) else chunks
    check_config(canon, P, M, v)
    tw = t_b / 2 if t_w is None else t_w
    if min(t_f, t_b, tw) < 0 or tw > t_b:
        raise ScheduleError(f"invalid durations t_f={t_f}, t_b={t_b}, t_w={tw} (need 0 <= t_w <= t_b)")
    ti = t_b - tw
    busy = v * M * (t_f + t_b)
    stages = range(P * v)

    def peaks_from_order() -> dict[int, int]:
        s = build_schedule(canon, P, M, v)
        return peak_inflight_of_orders(s.orders, s.placement)

    def result(bt: float | None, formula: str, ratio_formula: str | None, peaks: dict[int, int],
               peak_formula: str, notes: str) -> Theory:
        if bt is None:
            return Theory(None, formula, None, None, peaks, notes, None, peak_formula, busy)
        total = busy + bt
        frac = bt / total if total > 0 else 0.0
        ratio = bt / busy if busy > 0 else None
        return Theory(frac, formula, ratio, ratio_formula, peaks, notes, bt, peak_formula, busy)

    if canon == "naive":
        bt = (P - 1) * M * (t_f + t_b)
        return result(bt, "(P-1)/P", "P-1", {s: min(M, 1) for s in stages}, "1",
                      "one microbatch in the pipeline at a time; holds for any per-stage "
                      "durations, zero communication")
    if canon in ("gpipe", "1f1b", "eager-1f1b"):
        bt = (P - 1) * (t_f + t_b)
        if canon == "gpipe":
            peaks, pf = {s: M for s in stages}, "M"
        elif canon == "1f1b":
            peaks, pf = {s: min(M, P - s) for s in stages}, "min(M, P-s)"
        else:
            peaks, pf = {s: min(M, 2 * (P - s) - 1) for s in stages}, "min(M, 2(P-s)-1)"
        return result(bt, "(P-1)/(M+P-1)", "(P-1)/M", peaks, pf,
                      _UNIFORM + "; exact for any T_F:T_B ratio. (P-1)/M is the bubble-to-"
                      "compute ratio, not the fraction of the step")
    if canon in ("interleaved-1f1b", "looped-bfs"):
        slots = max(v * M, (v - 1) * P + M) + P - 1  # step length in units of (T_F+T_B)
        bt = (slots - v * M) * (t_f + t_b)
        if M >= P:
            formula, rf = "(P-1)/(vM+P-1)", "(P-1)/(vM)"
        else:
            formula, rf = "1 - vM/(vP+M-1)  [M < P]", "(vP+M-1-vM)/(vM)"
        if canon == "looped-bfs":
            peaks, pf = {s: M for s in stages}, "M"
            extra = "all forwards of a local stage run before its backwards"
        else:
            peaks, pf = peaks_from_order(), "counted from torch's order"
            extra = "torch's flexible interleaving (M a multiple of max(1, M//P))"
        return result(bt, formula, rf, peaks, pf,
                      _UNIFORM + f" per chunk; {extra}. General form: 1 - vM/(max(vM, "
                      "(v-1)P+M)+P-1)")
    if canon in ("zb-h1", "interleaved-zb"):
        peaks, pf = {s: min(M, P * v - s) for s in stages}, "min(M, vP-s)"
        if canon == "interleaved-zb" and v > 1:
            peaks, pf = peaks_from_order(), "counted from torch's order"
        valid = M >= P and tw <= t_f and tw <= ti
        formula = "(P-1)(T_F+T_I-T_W) / (vM(T_F+T_B) + (P-1)(T_F+T_I-T_W))"
        if canon == "zb-h1":
            formula = "(P-1)(T_F+T_I-T_W) / (M(T_F+T_B) + (P-1)(T_F+T_I-T_W))"
        notes = ("ZB-H1 bubble time (P-1)(T_F+T_B-T_W) of the ZB paper, whose T_B is our T_I "
                 "(input-gradient pass); holds when M >= P and T_W <= min(T_F, T_I), "
                 + _UNIFORM.replace("every B takes T_B", "I takes T_I, W takes T_W"))
        bt = (P - 1) * (t_f + ti - tw) if valid else None
        if not valid:
            notes = "no closed form for these inputs: " + notes + "; use the replay"
        return result(bt, formula, "(P-1)(T_F+T_I-T_W)/(vM(T_F+T_B))", peaks, pf, notes)
    if canon == "zb-h2":
        peaks, pf = {s: min(M, 2 * (P - s) - 1) for s in stages}, "min(M, 2(P-s)-1)"
        valid = M >= 2 * P and tw <= t_f
        bt = (P - 1) * (t_f + max(0.0, ti - 2 * tw)) if valid else None
        notes = ("per-step bubble time (P-1)(T_F+max(0, T_I-2T_W)); holds when M >= 2P and "
                 "T_W <= T_F. The paper's (P-1)(T_F+T_B-2T_W) (T_B = our T_I) is the same when "
                 "T_I >= 2T_W; below that it assumes consecutive steps overlap (optimizer "
                 "post-validation), while a per-step window cannot go under (P-1)T_F: the "
                 "last rank starts (P-1)T_F late")
        if not valid:
            notes = "no closed form for these inputs: " + notes + "; use the replay"
        return result(bt, "(P-1)(T_F+max(0,T_I-2T_W)) / (M(T_F+T_B) + that)",
                      "(P-1)(T_F+max(0,T_I-2T_W))/(M(T_F+T_B))", peaks, pf, notes)
    if canon == "zbv":
        peaks, pf = {s: min(M, 2 * P - s) for s in stages}, "min(M, 2P-s)"
        valid = M >= 2 * P - 1 and abs(t_f - ti) <= 1e-12 * max(1.0, t_f) and tw <= t_f
        bt = (P - 1) * (t_f + max(0.0, ti - 2 * tw)) if valid else None
        notes = ("per-step bubble time (P-1)(T_F+max(0,T_I-2T_W)) with per-chunk times; holds "
                 "when T_F = T_I, T_W <= T_F and M >= 2P-1. At T_F=T_I=T_W that is (P-1)T_F: "
                 "the paper's 'zero bubble' counts consecutive steps overlapping; within one "
                 "step the last rank still waits (P-1)T_F for its first input")
        if not valid:
            notes = "no closed form for these inputs (needs T_F = T_I, T_W <= T_F, M >= 2P-1): " + notes
        return result(bt, "(P-1)(T_F+max(0,T_I-2T_W)) / (2M(T_F+T_B) + that)",
                      "(P-1)(T_F+max(0,T_I-2T_W))/(2M(T_F+T_B))", peaks, pf, notes)
    if canon == "dualpipev":
        peaks, pf = {s: min(M, 2 * P - s) for s in stages}, "min(M, 2P-s)"
        valid = abs(t_f - ti) <= 1e-12 * max(1.0, t_f)
        bt = (P - 1) * max(t_f, t_f + ti - tw) if valid else None
        notes = ("per-step bubble time (P-1)max(T_F, T_F+T_I-T_W) with per-chunk times, "
                 "overlapped F+B pairs run back to back (torch's runtime runs OVERLAP_F_B's "
                 "sub-actions sequentially); holds when T_F = T_I. DualPipe's published "
                 "(PP/2-1)(F&B+B-3W) assumes real F/B overlap")
        if not valid:
            notes = "no closed form for these inputs (needs T_F = T_I): " + notes
        return result(bt, "(P-1)max(T_F,T_F+T_I-T_W) / (2M(T_F+T_B) + that)",
                      "(P-1)max(T_F,T_F+T_I-T_W)/(2M(T_F+T_B))", peaks, pf, notes)
    raise ScheduleError(f"no theory for schedule {canon!r}")  # pragma: no cover


def is_split(name: str) -> bool:
    """True when the named schedule runs I/W instead of (only) B."""
    return canonical_name(name) in _SPLIT
