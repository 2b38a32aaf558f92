"""The schedule catalogue: per-rank compute orders of every known schedule.

Where torch 2.13 implements a schedule (gpipe, 1f1b, interleaved-1f1b, looped-bfs,
interleaved-zb, zbv, dualpipev) the order here is the order torch *executes*, checked by
``tests/test_schedules_torch.py``. The rules are restated in ``docs/schedules.md``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from functools import lru_cache

from pipeaudit.actions import Action
from pipeaudit.errors import ScheduleError
from pipeaudit.schedules.model import Schedule, as_orders, loop_placement, v_placement

F, B, I, W = "F", "B", "I", "W"

SCHEDULE_NAMES: tuple[str, ...] = (
    "naive",
    "gpipe",
    "1f1b",
    "eager-1f1b",
    "interleaved-1f1b",
    "looped-bfs",
    "zb-h1",
    "zb-h2",
    "interleaved-zb",
    "zbv",
    "dualpipev",
)

# normalised alias (lower case, no '-', '_' or spaces) -> canonical name
_ALIASES: dict[str, str] = {
    "naive": "naive",
    "sequential": "naive",
    "gpipe": "gpipe",
    "filldrain": "gpipe",
    "1f1b": "1f1b",
    "pipedreamflush": "1f1b",
    "eager1f1b": "eager-1f1b",
    "interleaved1f1b": "interleaved-1f1b",
    "interleaved": "interleaved-1f1b",
    "loopedbfs": "looped-bfs",
    "bfs": "looped-bfs",
    "zbh1": "zb-h1",
    "zbh2": "zb-h2",
    "interleavedzb": "interleaved-zb",
    "interleavedzerobubble": "interleaved-zb",
    "zb1p": "interleaved-zb",
    "zbv": "zbv",
    "zbvzerobubble": "zbv",
    "dualpipev": "dualpipev",
}

#: torch.distributed.pipelining class for the schedules torch implements
TORCH_CLASSES: dict[str, str] = {
    "gpipe": "ScheduleGPipe",
    "1f1b": "Schedule1F1B",
    "interleaved-1f1b": "ScheduleInterleaved1F1B",
    "looped-bfs": "ScheduleLoopedBFS",
    "interleaved-zb": "ScheduleInterleavedZeroBubble",
    "zbv": "ScheduleZBVZeroBubble",
    "dualpipev": "ScheduleDualPipeV",
}

#: The torch code that executes each torch schedule: PipelineScheduleSingle's own loop, or
#: the action runtime (SEND/RECV actions and per-action bookkeeping) that the multi-stage
#: schedules run on. Their host overhead per action differs (docs/explain.md).
SINGLE_LOOP, ACTION_RUNTIME = "PipelineScheduleSingle", "_PipelineScheduleRuntime"


def torch_runtime(name: str) -> str | None:
    """:data:`SINGLE_LOOP` or :data:`ACTION_RUNTIME` for a schedule torch implements, else None."""
    if name not in TORCH_CLASSES:
        return None
    return SINGLE_LOOP if name in ("gpipe", "1f1b") else ACTION_RUNTIME


#: one-line description per schedule, shown by the CLI and the docs
DESCRIPTIONS: dict[str, str] = {
    "naive": "one microbatch at a time through all stages, no overlap between microbatches",
    "gpipe": "fill-drain: all forwards, then all backwards",
    "1f1b": "P-s warm-up forwards on stage s, then one backward / one forward",
    "eager-1f1b": "1F1B with 2(P-s)-1 warm-up forwards (room to overlap P2P)",
    "interleaved-1f1b": "Megatron interleaved 1F1B over v chunks, loop placement",
    "looped-bfs": "breadth-first: all microbatches per local stage, loop placement",
    "zb-h1": "zero bubble ZB-H1: 1F1B memory, W passes deferred into the bubbles",
    "zb-h2": "zero bubble ZB-H2: 2(P-s)-1 warm-up forwards, W passes deferred",
    "interleaved-zb": "torch ScheduleInterleavedZeroBubble (ZB1P) over v chunks",
    "zbv": "zero bubble ZB-V, V placement, two chunks per rank",
    "dualpipev": "DualPipeV, V placement, overlapped F+B written as F then B",
}

_MULTI_CHUNK_DEFAULT = 2
_ONE_CHUNK = {"naive", "gpipe", "1f1b", "eager-1f1b", "zb-h1", "zb-h2"}
_TWO_CHUNKS = {"zbv", "dualpipev"}
_SPLIT = {"zb-h1", "zb-h2", "interleaved-zb", "zbv", "dualpipev"}


def canonical_name(name: str) -> str:
    """Resolve a schedule name or alias (case, '-', '_' and spaces ignored)."""
    key = "".join(ch for ch in name.lower() if ch not in "-_ ")
    if key.startswith("schedule"):
        key = key[len("schedule") :]
    try:
        return _ALIASES[key]
    except KeyError:
        raise ScheduleError(
            f"unknown schedule {name!r}; known schedules: {', '.join(SCHEDULE_NAMES)}"
        ) from None


def default_chunks(name: str) -> int:
    """Stages per rank used when the caller gives none."""
    name = canonical_name(name)
    return 1 if name in _ONE_CHUNK else _MULTI_CHUNK_DEFAULT


def check_config(name: str, num_ranks: int, num_microbatches: int, chunks: int) -> None:
    """Raise :class:`ScheduleError` if ``name`` cannot run with (P, M, v)."""
    for label, value in (("P (ranks)", num_ranks), ("M (microbatches)", num_microbatches),
                         ("v (chunks)", chunks)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ScheduleError(f"{name}: {label} must be a positive integer, got {value!r}")
    P, M, v = num_ranks, num_microbatches, chunks
    if name in _ONE_CHUNK and v != 1:
        raise ScheduleError(f"{name} has one stage per rank; got v={v} (use v=1)")
    if name in _TWO_CHUNKS and v != 2:
        raise ScheduleError(f"{name} needs exactly 2 stages per rank (V placement); got v={v}")
    if name == "1f1b" and M < P:
        raise ScheduleError(
            f"1f1b needs at least as many microbatches as stages (M >= P), as torch's "
            f"Schedule1F1B requires; got M={M}, P={P}"
        )
    if name == "dualpipev" and M < 2 * P:
        raise ScheduleError(
            f"dualpipev needs at least as many microbatches as stages (M >= 2P = {2 * P}), "
            f"as torch's ScheduleDualPipeV requires; got M={M}"
        )
    if name in ("interleaved-1f1b", "interleaved-zb"):
        rounds = max(1, M // P)
        if M % rounds:
            raise ScheduleError(
                f"{name} needs M to be a multiple of the number of rounds max(1, M // P) = "
                f"{rounds} (torch's flexible interleaving); got M={M}, P={P}"
            )


def build_schedule(
    name: str, num_ranks: int, num_microbatches: int, chunks: int | None = None
) -> Schedule:
    """Build the catalogue schedule ``name`` for P ranks, M microbatches and v chunks.

    Raises :class:`ScheduleError` for unknown names and invalid combinations.
    """
    canon = canonical_name(name)
    v = default_chunks(canon) if chunks is None else chunks
    check_config(canon, num_ranks, num_microbatches, v)
    return _build(canon, num_ranks, num_microbatches, v)


@lru_cache(maxsize=512)
def _build(canon: str, P: int, M: int, v: int) -> Schedule:
    builder = _BUILDERS[canon]
    placement = v_placement(P) if canon in _TWO_CHUNKS else loop_placement(P, v)
    orders = [builder(P, M, v, r) for r in range(P)]
    return Schedule(
        name=canon,
        num_ranks=P,
        num_microbatches=M,
        chunks=v,
        placement=placement,
        orders=as_orders(orders),
        split_backward=canon in _SPLIT,
    )


# --------------------------------------------------------------------------- one chunk


def _naive(P: int, M: int, v: int, r: int) -> list[Action]:
    out: list[Action] = []
    for m in range(M):
        out += [Action(r, F, m), Action(r, B, m)]
    return out


def _gpipe(P: int, M: int, v: int, r: int) -> list[Action]:
    # torch ScheduleGPipe._step_microbatches: forward 0..M-1, then backward 0..M-1
    return [Action(r, F, m) for m in range(M)] + [Action(r, B, m) for m in range(M)]


def _one_f_one_b(P: int, M: int, warmup: int, r: int) -> list[Action]:
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


def _1f1b(P: int, M: int, v: int, r: int) -> list[Action]:
    # torch Schedule1F1B._step_microbatches: min(M, P - s) warm-up forwards, then 1B1F.
    return _one_f_one_b(P, M, P - r, r)


def _eager_1f1b(P: int, M: int, v: int, r: int) -> list[Action]:
    return _one_f_one_b(P, M, 2 * (P - r) - 1, r)


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


def _interleaved_1f1b(P: int, M: int, v: int, r: int) -> list[Action]:
    return _interleaved(P, M, v, r, zero_bubble=False)


def _interleaved_zb(P: int, M: int, v: int, r: int) -> list[Action]:
    return _interleaved(P, M, v, r, zero_bubble=True)


def _looped_bfs(P: int, M: int, v: int, r: int) -> list[Action]:
    stages = range(r, P * v, P)
    out = [Action(s, F, m) for s in stages for m in range(M)]
    out += [Action(s, B, m) for s in reversed(stages) for m in reversed(range(M))]
    return out


def _zbv(P: int, M: int, v: int, r: int) -> list[Action]:
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


def _dualpipev(P: int, M: int, v: int, r: int) -> list[Action]:
    """torch ScheduleDualPipeV. An OVERLAP_F_B action runs its forward, then its full
    backward: it appears here as that F followed by that B."""
    s0, s1 = r, 2 * P - 1 - r
    nxt: dict[tuple[int, str], int] = defaultdict(int)  # next microbatch per (stage, F|I|W)
    pending_w: list[tuple[int, int]] = []
    out: list[Action] = []

    def add(stage: int, kind: str) -> None:
        if kind == B:  # a full backward advances both the I and the W counters
            out.append(Action(stage, B, nxt[(stage, I)]))
            nxt[(stage, I)] += 1
            nxt[(stage, W)] += 1
            return
        m = nxt[(stage, kind)]
        out.append(Action(stage, kind, m))
        nxt[(stage, kind)] = m + 1
        if kind == I:
            pending_w.append((stage, m))

    def overlap(f_stage: int, b_stage: int) -> None:
        add(f_stage, F)
        add(b_stage, B)

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


def _zb_h1(P: int, M: int, v: int, r: int) -> list[Action]:
    # ZB-H1 is torch's InterleavedZeroBubble with one chunk (see docs/schedules.md).
    return _interleaved(P, M, 1, r, zero_bubble=True)


def _zb_h2(P: int, M: int, v: int, r: int) -> list[Action]:
    from pipeaudit.schedules.greedy import zb_h2_orders

    return list(zb_h2_orders(P, M)[r])


_BUILDERS: dict[str, Callable[[int, int, int, int], list[Action]]] = {
    "naive": _naive,
    "gpipe": _gpipe,
    "1f1b": _1f1b,
    "eager-1f1b": _eager_1f1b,
    "interleaved-1f1b": _interleaved_1f1b,
    "looped-bfs": _looped_bfs,
    "zb-h1": _zb_h1,
    "zb-h2": _zb_h2,
    "interleaved-zb": _interleaved_zb,
    "zbv": _zbv,
    "dualpipev": _dualpipev,
}
