"""Per-rank compute orders of the catalogue schedules, one function per schedule.

Each builder takes (P, M, v, rank) and returns the rank's actions in execution order. A
``(forward, backward)`` tuple in the list is an overlapped pair that runs as one unit (torch's
``OVERLAP_F_B``: the forward, then the backward, both outputs sent after the backward). Where
torch 2.13 implements the schedule the order is the one torch *executes*, checked by
``tests/unit/schedules/test_schedules_torch.py``; the rules are restated in ``docs/schedules.md``.
"""

from __future__ import annotations

from collections import defaultdict

from pipeaudit.actions import Action

F, B, I, W = "F", "B", "I", "W"

Step = Action | tuple[Action, Action]


# --------------------------------------------------------------------------- one chunk


def naive(P: int, M: int, v: int, r: int) -> list[Action]:
    out: list[Action] = []
    for m in range(M):
        out += [Action(r, F, m), Action(r, B, m)]
    return out


def gpipe(P: int, M: int, v: int, r: int) -> list[Action]:
    # torch ScheduleGPipe._step_microbatches: forward 0..M-1, then backward 0..M-1
    return [Action(r, F, m) for m in range(M)] + [Action(r, B, m) for m in range(M)]


def _warmup_then_alternate(P: int, M: int, warmup: int, r: int) -> list[Action]:
    """Warm-up forwards, then backward/forward pairs, then the remaining backwards."""
    warmup = min(M, warmup)
    out = [Action(r, F, m) for m in range(warmup)]
    fwd, bwd = warmup, 0
    while bwd < M:
        out.append(Action(r, B, bwd))
        bwd += 1
        if fwd < M:
            out.append(Action(r, F, fwd))
            fwd += 1
    return out


def one_f_one_b(P: int, M: int, v: int, r: int) -> list[Action]:
    # torch Schedule1F1B._step_microbatches: min(M, P - s) warm-up forwards, then 1B1F.
    return _warmup_then_alternate(P, M, P - r, r)


def eager_1f1b(P: int, M: int, v: int, r: int) -> list[Action]:
    return _warmup_then_alternate(P, M, 2 * (P - r) - 1, r)


def delayed_backward(P: int, M: int, v: int, r: int) -> list[Action]:
    # the hand-written loop "forward of i, then backward of i-1", in one process: every stage
    # runs F0, then F(i) B(i-1), then the last backward
    return _warmup_then_alternate(P, M, 2, r)


# ---------------------------------------------------------------- torch runtime schedules


def _warmup_ops(r: int, v: int, mb_per_round: int, P: int, M: int, factor: int) -> int:
    return min((v - 1) * mb_per_round + factor * (P - 1 - r), M * v)


def _interleaved(P: int, M: int, v: int, r: int, zero_bubble: bool) -> list[Action]:
    """torch's ``_get_1f1b_rank_ops`` for Interleaved1F1B / InterleavedZeroBubble."""
    rounds = max(1, M // P)
    per_round = M // rounds
    warmup = _warmup_ops(r, v, per_round, P, M, 1 if zero_bubble else 2)
    total_mb_ops = v * M
    fwd_bwd = total_mb_ops - warmup
    total = warmup + fwd_bwd + warmup  # cooldown == warmup

    def fwd_stage(op: int) -> int:
        return ((op // per_round) % v) * P + r

    def bwd_stage(op: int) -> int:
        return (v - 1 - ((op - warmup) // per_round) % v) * P + r

    counters: dict[tuple[int, str], int] = defaultdict(int)

    def take(stage: int, kind: str) -> Action:
        m = counters[(stage, kind)]
        counters[(stage, kind)] = m + 1
        return Action(stage, kind, m)

    bkind = I if zero_bubble else B
    out: list[Action] = []
    bwd_ops: list[int] = []
    w_done = 0
    for op in range(total):
        if op < warmup + fwd_bwd:
            out.append(take(fwd_stage(op), F))
        if op >= warmup:
            out.append(take(bwd_stage(op), bkind))
            bwd_ops.append(op)
            if zero_bubble and op - warmup >= r:  # rank r holds back r weight passes
                out.append(take(bwd_stage(bwd_ops[w_done]), W))
                w_done += 1
    while zero_bubble and w_done < len(bwd_ops):
        out.append(take(bwd_stage(bwd_ops[w_done]), W))
        w_done += 1
    return out


def interleaved_1f1b(P: int, M: int, v: int, r: int) -> list[Action]:
    return _interleaved(P, M, v, r, zero_bubble=False)


def interleaved_zb(P: int, M: int, v: int, r: int) -> list[Action]:
    return _interleaved(P, M, v, r, zero_bubble=True)


def looped_bfs(P: int, M: int, v: int, r: int) -> list[Action]:
    stages = range(r, P * v, P)
    out = [Action(s, F, m) for s in stages for m in range(M)]
    out += [Action(s, B, m) for s in reversed(stages) for m in reversed(range(M))]
    return out


def zbv(P: int, M: int, v: int, r: int) -> list[Action]:
    """torch ScheduleZBVZeroBubble: built for max(M, 2P-1) microbatches, extras dropped."""
    n = max(2 * P - 1, M)
    s0, s1 = r, 2 * P - 1 - r
    out: list[Action] = []
    f0 = f1 = b0 = b1 = 0
    for _ in range(2 * (P - r) - 1):
        out.append(Action(s0, F, f0))
        f0 += 1
    for _ in range(r):
        out += [Action(s1, F, f1), Action(s0, F, f0)]
        f1 += 1
        f0 += 1
    for _ in range(P - r):
        out += [Action(s1, F, f1), Action(s1, I, b1), Action(s1, W, b1)]
        f1 += 1
        b1 += 1
    while f1 < f0 or f0 < n:
        if f0 < n:
            out.append(Action(s0, F, f0))
            f0 += 1
        out += [Action(s0, I, b0), Action(s0, W, b0)]
        b0 += 1
        out += [Action(s1, F, f1), Action(s1, I, b1), Action(s1, W, b1)]
        f1 += 1
        b1 += 1
    w0, w1 = b0, b1
    for _ in range(r):
        out += [Action(s0, I, b0), Action(s1, I, b1)]
        b0 += 1
        b1 += 1
    for _ in range(P - r):
        out += [Action(s0, I, b0), Action(s0, W, w0)]
        b0 += 1
        w0 += 1
    out += [Action(s1, W, m) for m in range(w1, b1)]
    out += [Action(s0, W, m) for m in range(w0, b0)]
    return [a for a in out if a.microbatch < M]


def dualpipev(P: int, M: int, v: int, r: int) -> list[Step]:
    """torch ScheduleDualPipeV. Its OVERLAP_F_B actions are ``(F, B)`` pairs here: torch runs
    the forward, then the full backward, and sends both outputs after the backward."""
    s0, s1 = r, 2 * P - 1 - r
    nxt: dict[tuple[int, str], int] = defaultdict(int)  # next microbatch per (stage, F|I|W)
    pending_w: list[tuple[int, int]] = []
    out: list[Step] = []

    def make(stage: int, kind: str) -> Action:
        if kind == B:  # a full backward advances both the I and the W counters
            act = Action(stage, B, nxt[(stage, I)])
            nxt[(stage, I)] += 1
            nxt[(stage, W)] += 1
            return act
        m = nxt[(stage, kind)]
        nxt[(stage, kind)] = m + 1
        if kind == I:
            pending_w.append((stage, m))
        return Action(stage, kind, m)

    def add(stage: int, kind: str) -> None:
        out.append(make(stage, kind))

    def overlap(f_stage: int, b_stage: int) -> None:
        fwd = make(f_stage, F)
        out.append((fwd, make(b_stage, B)))

    def weight_if_pending() -> None:
        if pending_w:
            stage, m = pending_w.pop(0)
            out.append(Action(stage, W, m))
            nxt[(stage, W)] += 1

    for _ in range(2 * (P - r - 1)):  # step 1: F0
        add(s0, F)
    for _ in range(r + 1):  # step 2: F0 F1
        add(s0, F)
        add(s1, F)
    for _ in range(P - r - 1):  # step 3: I1 W F1
        add(s1, I)
        weight_if_pending()
        add(s1, F)
    for i in range(M - 2 * P + r + 1):  # step 4: (F0 B1) (F1 B0)
        if i == 0 and r == P - 1:
            add(s0, F)
            add(s1, B)
        else:
            overlap(s0, s1)
        overlap(s1, s0)
    for _ in range(P - r - 1):  # step 5: B1 (F1 B0)
        add(s1, B)
        overlap(s1, s0)
    zb = False
    half = (r + 1) // 2
    for i in range(r + 1):  # step 6: B1 B0, second half split into I (+ W later)
        if i == half and r % 2 == 1:
            zb = True
        add(s1, I if zb else B)
        if i == half and r % 2 == 0:
            zb = True
        add(s0, I if zb else B)
    for _ in range(P - r - 1):  # step 7: W B0
        weight_if_pending()
        add(s0, I if zb else B)
    for _ in range(r + 1):  # step 8: W
        weight_if_pending()
    return out


# ------------------------------------------------------------------- zero bubble H1 / H2


def zb_h1(P: int, M: int, v: int, r: int) -> list[Action]:
    # ZB-H1 is torch's InterleavedZeroBubble with one chunk (see docs/schedules.md).
    return _interleaved(P, M, 1, r, zero_bubble=True)


def zb_h2(P: int, M: int, v: int, r: int) -> list[Action]:
    from pipeaudit.schedules.greedy import zb_h2_orders

    return list(zb_h2_orders(P, M)[r])
