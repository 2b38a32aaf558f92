"""Closed-form bubble and activation memory, one small function per catalogue schedule.

Each function takes the :class:`Inputs` of one evaluation (P, M, v and the per-stage
durations) and returns a :class:`Theory`. :func:`pipeaudit.schedules.theory` picks the
function from the catalogue entry; ``tests/unit/schedules/test_schedules_theory.py`` checks every formula
against the replay wherever it claims to hold. Bubbles use docs/metrics.md's definition: idle share
of the step window [earliest start, latest end] over *all* ranks, averaged over ranks. With
equal work per rank that is ``bubble_time / (busy + bubble_time)``, ``busy`` one rank's compute.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

UNIFORM = ("uniform per-stage durations (every stage's F takes T_F, every B takes T_B), "
           "zero communication")
_SPLIT_UNIFORM = UNIFORM.replace("every B takes T_B", "I takes T_I, W takes T_W")


@dataclass(frozen=True)
class Theory:
    """A schedule's closed form: bubble as a fraction of the step (None when there is no
    closed form for these inputs), the bubble-to-compute ratio, per-stage peak in-flight
    microbatches, the assumptions, and the published figure of the schedule's source
    (:class:`pipeaudit.schedules.published.Published`, None when there is none)."""

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
    published: Any = None


@dataclass(frozen=True)
class Inputs:
    """One evaluation: P, M, v, per-stage (per-chunk) T_F, full T_B, T_W (T_I = T_B - T_W),
    and the peak in-flight microbatches counted from the schedule's order (built lazily)."""

    P: int
    M: int
    v: int
    t_f: float
    t_b: float
    t_w: float
    order_peaks: Callable[[], dict[int, int]]

    @property
    def t_i(self) -> float:
        return self.t_b - self.t_w

    @property
    def busy(self) -> float:
        """One rank's compute in a step: v chunks x M microbatches x (T_F + T_B)."""
        return self.v * self.M * (self.t_f + self.t_b)

    @property
    def stages(self) -> range:
        return range(self.P * self.v)

    def peaks(self, per_stage: Callable[[int], int]) -> dict[int, int]:
        return {s: per_stage(s) for s in self.stages}

    def result(self, bubble_time: float | None, formula: str, ratio_formula: str | None,
               peaks: dict[int, int], peak_formula: str, notes: str) -> Theory:
        """The Theory of a bubble time (None: no closed form for these inputs)."""
        busy = self.busy
        if bubble_time is None:
            return Theory(None, formula, None, None, peaks, notes, None, peak_formula, busy)
        total = busy + bubble_time
        frac = bubble_time / total if total > 0 else 0.0
        ratio = bubble_time / busy if busy > 0 else None
        return Theory(frac, formula, ratio, ratio_formula, peaks, notes, bubble_time,
                      peak_formula, busy)


def _equal(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-12 * max(1.0, abs(a), abs(b))


def _no_closed_form(notes: str, need: str = "") -> str:
    head = "no closed form for these inputs" + (f" (needs {need})" if need else "")
    return f"{head}: {notes}; use the replay"


def naive(x: Inputs) -> Theory:
    bt = (x.P - 1) * x.M * (x.t_f + x.t_b)
    return x.result(bt, "(P-1)/P", "P-1", x.peaks(lambda s: min(x.M, 1)), "1",
                    "one microbatch in the pipeline at a time; holds for any per-stage "
                    "durations, zero communication")


def _one_chunk_1f1b_family(x: Inputs, peaks: dict[int, int], peak_formula: str) -> Theory:
    return x.result((x.P - 1) * (x.t_f + x.t_b), "(P-1)/(M+P-1)", "(P-1)/M", peaks, peak_formula,
                    UNIFORM + "; exact for any T_F:T_B ratio. (P-1)/M is the bubble-to-compute "
                    "ratio, not the fraction of the step")


def gpipe(x: Inputs) -> Theory:
    return _one_chunk_1f1b_family(x, x.peaks(lambda s: x.M), "M")


def one_f_one_b(x: Inputs) -> Theory:
    return _one_chunk_1f1b_family(x, x.peaks(lambda s: min(x.M, x.P - s)), "min(M, P-s)")


def eager_1f1b(x: Inputs) -> Theory:
    return _one_chunk_1f1b_family(x, x.peaks(lambda s: min(x.M, 2 * (x.P - s) - 1)),
                                  "min(M, 2(P-s)-1)")


def _interleaved_family(x: Inputs, peaks: dict[int, int], peak_formula: str, extra: str) -> Theory:
    P, M, v = x.P, x.M, x.v
    slots = max(v * M, (v - 1) * P + M) + P - 1  # step length in units of (T_F+T_B)
    bt = (slots - v * M) * (x.t_f + x.t_b)
    if M >= P:
        formula, rf = "(P-1)/(vM+P-1)", "(P-1)/(vM)"
    else:
        formula, rf = "1 - vM/(vP+M-1)  [M < P]", "(vP+M-1-vM)/(vM)"
    return x.result(bt, formula, rf, peaks, peak_formula,
                    UNIFORM + f" per chunk; {extra}. General form: 1 - vM/(max(vM, (v-1)P+M)+P-1)")


def interleaved_1f1b(x: Inputs) -> Theory:
    return _interleaved_family(x, x.order_peaks(), "counted from torch's order",
                               "torch's flexible interleaving (M a multiple of max(1, M//P))")


def looped_bfs(x: Inputs) -> Theory:
    return _interleaved_family(x, x.peaks(lambda s: x.M), "M",
                               "all forwards of a local stage run before its backwards")


def zb_h1(x: Inputs) -> Theory:
    """ZB-H1, and torch's InterleavedZeroBubble over v chunks (ZB-H1 when v = 1)."""
    P, M, v = x.P, x.M, x.v
    peaks, pf = x.peaks(lambda s: min(M, P * v - s)), "min(M, vP-s)"
    if v > 1:
        peaks, pf = x.order_peaks(), "counted from torch's order"
    valid = M >= P and x.t_w <= x.t_f and x.t_w <= x.t_i
    formula = ("(P-1)(T_F+T_I-T_W) / (M(T_F+T_B) + (P-1)(T_F+T_I-T_W))" if v == 1 else
               "(P-1)(T_F+T_I-T_W) / (vM(T_F+T_B) + (P-1)(T_F+T_I-T_W))")
    notes = ("ZB-H1 bubble time (P-1)(T_F+T_B-T_W) of the ZB paper, whose T_B is our T_I "
             "(input-gradient pass); holds when M >= P and T_W <= min(T_F, T_I), " + _SPLIT_UNIFORM)
    bt = (P - 1) * (x.t_f + x.t_i - x.t_w) if valid else None
    return x.result(bt, formula, "(P-1)(T_F+T_I-T_W)/(vM(T_F+T_B))", peaks, pf,
                    notes if valid else _no_closed_form(notes))


def zb_h2(x: Inputs) -> Theory:
    P, M = x.P, x.M
    valid = M >= 2 * P and x.t_w <= x.t_f
    bt = (P - 1) * (x.t_f + max(0.0, x.t_i - 2 * x.t_w)) if valid else None
    notes = ("per-step bubble time (P-1)(T_F+max(0, T_I-2T_W)); holds when M >= 2P and "
             "T_W <= T_F. No step can have less than (P-1)T_F: rank P-1 waits that long for its "
             "first input and every rank does the same work")
    return x.result(bt, "(P-1)(T_F+max(0,T_I-2T_W)) / (M(T_F+T_B) + that)",
                    "(P-1)(T_F+max(0,T_I-2T_W))/(M(T_F+T_B))",
                    x.peaks(lambda s: min(M, 2 * (P - s) - 1)), "min(M, 2(P-s)-1)",
                    notes if valid else _no_closed_form(notes))


def zbv(x: Inputs) -> Theory:
    P, M = x.P, x.M
    valid = M >= 2 * P - 1 and _equal(x.t_f, x.t_i) and x.t_w <= x.t_f
    bt = (P - 1) * (x.t_f + max(0.0, x.t_i - 2 * x.t_w)) if valid else None
    notes = ("per-step bubble time (P-1)(T_F+max(0,T_I-2T_W)) with per-chunk times; holds when "
             "T_F = T_I, T_W <= T_F and M >= 2P-1. At T_F = T_I = T_W that is (P-1)T_F: rank "
             "P-1 waits P-1 forward chunks for its first input")
    return x.result(bt, "(P-1)(T_F+max(0,T_I-2T_W)) / (2M(T_F+T_B) + that)",
                    "(P-1)(T_F+max(0,T_I-2T_W))/(2M(T_F+T_B))",
                    x.peaks(lambda s: min(M, 2 * P - s)), "min(M, 2P-s)",
                    notes if valid else _no_closed_form(notes, "T_F = T_I, T_W <= T_F, M >= 2P-1"))


def dualpipev(x: Inputs) -> Theory:
    P = x.P
    valid = _equal(x.t_f, x.t_i)
    bt = (P - 1) * max(x.t_f + 2 * x.t_b - 3 * x.t_w, 2 * x.t_f) if valid else None
    notes = ("per-step bubble time (P-1)max(T_F+2T_B-3T_W, 2T_F) with per-chunk times; holds "
             "when T_F = T_I. Each overlapped pair runs as torch runs OVERLAP_F_B: the forward, "
             "then the full backward, both outputs sent after the backward (F&B = T_F+T_B)")
    return x.result(bt, "(P-1)max(T_F+2T_B-3T_W, 2T_F) / (2M(T_F+T_B) + that)",
                    "(P-1)max(T_F+2T_B-3T_W, 2T_F)/(2M(T_F+T_B))",
                    x.peaks(lambda s: min(x.M, 2 * P - s)), "min(M, 2P-s)",
                    notes if valid else _no_closed_form(notes, "T_F = T_I"))


def delayed_backward(x: Inputs) -> Theory:
    return x.result(None, "no closed form: see the replay", None,
                    x.peaks(lambda s: min(x.M, 2)), "min(M, 2)",
                    "a hand-written loop (forward of i, then backward of i-1 through every stage): "
                    "every stage holds two microbatches; the bubble comes from replaying the order")


def block_built(memory: str) -> Callable[[Inputs], Theory]:
    """Theory of a schedule built from a building block: no closed-form bubble (the replay
    gives it); the peak in-flight per stage counted from its order, which the block fixes
    (``memory`` says what the source states)."""

    def theory(x: Inputs) -> Theory:
        return x.result(None, "no closed form: built from a building block, see the replay",
                        None, x.order_peaks(), "counted from the order",
                        f"the bubble comes from replaying the order; {memory}")

    return theory
