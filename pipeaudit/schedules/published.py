"""The bubble figures the schedules' own papers state, evaluated at given durations.

The per-step closed forms (:mod:`pipeaudit.schedules.closed_forms`) bound the bubble inside one
step's window, which is what the audit measures. Papers state other figures: an absolute bubble
time in T_F, T_B, T_W, a share of the step, a ratio of bubble to compute time, or a steady
state in which consecutive steps overlap. Each function here evaluates one schedule's published
formula at the same per-stage durations, names its source and assumptions, and says why it
agrees with or differs from the per-step figure. ``value`` is always the fraction of the step
(bubble time / (compute + bubble time)), whatever form the source states it in.

Sources, as read for this module:

* DualPipe README (github.com/deepseek-ai/DualPipe, "Pipeline Bubbles and Memory Usage
  Comparison"), the same table as the DeepSeek-V3 technical report (arXiv 2412.19437),
  Table 2: 1F1B (PP-1)(F+B), ZB1P (PP-1)(F+B-2W), DualPipe and DualPipeV (PP/2-1)(F&B+B-3W);
  PP the number of stages, F/B/W per chunk, B the *full* backward, F&B an overlapped pair.
* Zero Bubble Pipeline Parallelism (Qi et al., ICLR 2024, arXiv 2401.10241), Table 2, with B
  the *input-gradient* pass (our I): 1F1B (p-1)(T_F+T_B+T_W), ZB-H1 (p-1)(T_F+T_B-T_W), ZB-H2
  (p-1)(T_F+T_B-2T_W); its README: at T_F = T_B = T_W, ZB-H2 (ZB2P) and ZB-V bubble rate 0.
* GPipe (Huang et al., NeurIPS 2019), Sec. 2.3: bubble overhead O((K-1)/(M+K-1)), K partitions.
* Megatron-LM (Narayanan et al., SC 2021), Sec. 2.2: interleaved schedule bubble time fraction
  (1/v)(p-1)/m, a ratio of bubble time to ideal compute time.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from pipeaudit.schedules.closed_forms import Inputs, Theory

FRACTION = "fraction of the step"
TIME = "bubble time per rank"
RATIO = "ratio of bubble time to compute time"

DUALPIPE = "DualPipe README / DeepSeek-V3 report (arXiv 2412.19437), Table 2"
ZERO_BUBBLE = "Zero Bubble PP (Qi et al., ICLR 2024, arXiv 2401.10241), Table 2"
ZERO_BUBBLE_README = "Zero Bubble PP README (sail-sg/zero-bubble-pipeline-parallelism), schedule table"
GPIPE = "GPipe (Huang et al., NeurIPS 2019), Sec. 2.3"
MEGATRON = "Megatron-LM (Narayanan et al., SC 2021), Sec. 2.2.2"

_STEADY_STATE = ("the steady state in which consecutive steps overlap: the ZB paper replaces the "
                 "optimizer's synchronisation with post-validation, so step k+1's warm-up fills "
                 "step k's cool-down")


@dataclass(frozen=True)
class Published:
    """A source's bubble figure at given durations. ``value`` is the fraction of the step;
    ``stated_as`` is the form the source states it in; ``holds`` whether the durations meet
    the source's assumptions; ``differs`` why it agrees with or differs from the per-step
    closed form."""

    source: str
    formula: str
    stated_as: str
    value: float | None
    bubble_time: float | None
    ratio: float | None
    assumptions: str
    holds: bool
    differs: str

    def to_dict(self, time_unit: str = "") -> dict[str, Any]:
        """JSON form: ``value`` is named as the fraction of the step, ``bubble_time`` gets the
        unit of the durations it was evaluated with."""
        d = asdict(self)
        d["value_is"] = FRACTION
        d["time_unit"] = time_unit
        return d


def _num(x: float) -> str:
    return f"{x:.6g}"


def _make(x: Inputs, source: str, formula: str, stated_as: str, bubble_time: float | None,
          assumptions: str, holds: bool, differs: str, fraction: float | None = None) -> Published:
    busy = x.busy
    value = fraction
    if value is None and bubble_time is not None:
        total = busy + bubble_time
        value = bubble_time / total if total > 0 else 0.0
    ratio = bubble_time / busy if bubble_time is not None and busy > 0 else None
    return Published(source, formula, stated_as, value, bubble_time, ratio, assumptions, holds,
                     differs)


def _equal(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-12 * max(1.0, abs(a), abs(b))


def gpipe(x: Inputs, per_step: Theory) -> Published:
    bt = (x.P - 1) * (x.t_f + x.t_b)
    return _make(x, GPIPE, "O((K-1)/(M+K-1)), K partitions = P", FRACTION, bt,
                 "K equal partitions, bubble counted in one mini-batch (fill and drain)", True,
                 "the same number as the per-step closed form (P-1)/(M+P-1): both are the idle "
                 "share of one step")


def one_f_one_b(x: Inputs, per_step: Theory) -> Published:
    bt = (x.P - 1) * (x.t_f + x.t_b)
    ratio = (x.P - 1) / x.M
    return _make(x, DUALPIPE, "(PP-1)(F+B), PP stages = P, B the full backward", TIME, bt,
                 "F and B per stage, the same on every stage; zero communication", True,
                 "the same bubble time as the per-step closed form, (P-1)(T_F+T_B) per rank. "
                 "The ZB paper's (p-1)(T_F+T_B+T_W) is the same time (its T_B excludes W). "
                 f"Megatron-LM's (p-1)/m = {_num(ratio)} divides that time by the compute "
                 "M(T_F+T_B): a ratio, not the fraction of the step")


def interleaved_1f1b(x: Inputs, per_step: Theory) -> Published:
    P, M, v = x.P, x.M, x.v
    bt = (P - 1) * (x.t_f + x.t_b)
    holds = M >= P
    same = ("the same bubble time as the per-step closed form, (P-1)(T_F+T_B) per rank with "
            f"per-chunk times; the source states it as a ratio to compute, (1/v)(p-1)/m = "
            f"{_num((P - 1) / (v * M))}, not the fraction of the step (P-1)/(vM+P-1)")
    other = ("M < P: Megatron-LM requires M to be a multiple of P; torch's flexible rounds "
             "cannot fill the pipeline, and the per-step bubble is larger, 1 - vM/(vP+M-1)")
    return _make(x, MEGATRON, "(1/v)(p-1)/m", RATIO, bt,
                 "v chunks per rank, M a multiple of P, equal chunks, zero communication",
                 holds, same if holds else other)


def zb_h1(x: Inputs, per_step: Theory) -> Published:
    P = x.P
    bt = (P - 1) * (x.t_f + x.t_i - x.t_w)
    holds = x.M >= P and x.t_w <= x.t_f and x.t_w <= x.t_i
    if holds:
        differs = ("the same bubble time as the per-step closed form: with T_W <= min(T_F, "
                   "T_I) every deferred W fits in a bubble")
    else:
        differs = ("not this schedule's bubble here: the formula needs M >= P and T_W <= "
                   "min(T_F, T_I), so that every deferred W fits in a bubble; the per-step "
                   "figure comes from the replay")
    return _make(x, ZERO_BUBBLE, "(p-1)(T_F+T_B-T_W), T_B = input-gradient pass (our T_I)",
                 TIME, bt, "T_F, T_B (= our T_I), T_W the same on every stage; zero "
                 "communication", holds, differs)


def interleaved_zb(x: Inputs, per_step: Theory) -> Published | None:
    if x.v != 1:
        return None  # the sources give ZB1P for one stage per rank only
    pub = zb_h1(x, per_step)
    return Published(DUALPIPE, "(PP-1)(F+B-2W), B the full backward", TIME, pub.value,
                     pub.bubble_time, pub.ratio, pub.assumptions, pub.holds,
                     pub.differs + "; the ZB paper's ZB-H1 (p-1)(T_F+T_B-T_W) is the same time "
                     "(its T_B is our T_I)")


def zb_h2(x: Inputs, per_step: Theory) -> Published:
    P = x.P
    bt = (P - 1) * (x.t_f + x.t_i - 2 * x.t_w)
    regime = x.M >= 2 * P and x.t_w <= x.t_f
    if not regime:
        differs = ("the per-step closed form needs M >= 2P and T_W <= T_F; outside it the "
                   "per-step figure comes from the replay")
    elif x.t_i >= 2 * x.t_w:
        differs = ("the same bubble time as the per-step closed form: with T_I >= 2T_W the "
                   "paper's figure is at least the (P-1)T_F that one step cannot go under")
    else:
        gap = (P - 1) * (2 * x.t_w - x.t_i)
        differs = (f"{_num(gap)} = (P-1)(2T_W-T_I) below the per-step figure: it counts "
                   f"{_STEADY_STATE}. Inside one step rank P-1 waits (P-1)T_F = "
                   f"{_num((P - 1) * x.t_f)} for its first input and every rank does the same "
                   "work, so no step has less bubble time")
    return _make(x, ZERO_BUBBLE, "(p-1)(T_F+T_B-2T_W), T_B = input-gradient pass (our T_I)",
                 TIME, bt, "T_F, T_B (= our T_I), T_W the same on every stage, zero "
                 "communication, optimizer post-validation (steps overlap)", bt >= 0, differs)


def zbv(x: Inputs, per_step: Theory) -> Published:
    holds = _equal(x.t_f, x.t_i) and _equal(x.t_i, x.t_w)
    floor = (x.P - 1) * x.t_f
    if holds:
        differs = (f"0 is {_STEADY_STATE}. Inside one step rank P-1 waits P-1 forward chunks, "
                   f"(P-1)T_F = {_num(floor)}, for its first input; the per-step closed form "
                   "counts it")
    else:
        differs = ("the source states 0 only for T_F = T_B = T_W (T_B our T_I); these durations "
                   "differ, and the per-step figure is the closed form's or the replay's")
    return _make(x, ZERO_BUBBLE_README, "0 at T_F = T_B = T_W (bubble rate)", FRACTION, 0.0,
                 "T_F = T_B (our T_I) = T_W per chunk, optimizer post-validation (steps "
                 "overlap)", holds, differs, fraction=0.0)


def dualpipev(x: Inputs, per_step: Theory) -> Published:
    P = x.P
    fb = x.t_f + x.t_b  # torch runs an OVERLAP_F_B pair's forward, then its backward
    bt = (P - 1) * (fb + x.t_b - 3 * x.t_w)
    holds = _equal(x.t_f, x.t_i) and x.t_w <= x.t_f
    if holds:
        differs = ("the same bubble time as the per-step closed form: replaying the order with "
                   "each overlapped pair run as torch runs it (forward, then backward, both "
                   "outputs sent after the pair) gives exactly (PP/2-1)(F&B+B-3W). A replay "
                   "that let a pair's forward output leave before its backward ran would be "
                   f"{_num((P - 1) * x.t_f)} = (P-1)T_F lower per rank")
    elif not _equal(x.t_f, x.t_i):
        differs = ("the formula matches the schedule only when T_F = T_I; the per-step figure "
                   "comes from the replay")
    else:
        differs = (f"with T_W > T_F the formula falls below (P-1)2T_F = {_num(2 * (P - 1) * x.t_f)}"
                   ", the per-step bubble time the replay gives for this order")
    return _make(x, DUALPIPE, "(PP/2-1)(F&B+B-3W), PP = 2P stages, F&B = F+B", TIME, bt,
                 "F, B (full backward), W per chunk, the same on every stage; F&B the time of "
                 "an overlapped forward+backward pair, F+B because torch runs the pair's "
                 "sub-actions one after the other; zero communication", holds, differs)
