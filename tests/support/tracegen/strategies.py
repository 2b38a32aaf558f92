"""Drawing cases: every dimension independently, within what each schedule accepts and a size
budget. One description (``build_case``) serves both hypothesis (``cases()``, which shrinks) and
a plain seeded ``random.Random`` (``random_case``, the benchmark's long search)."""

from __future__ import annotations

import random
from typing import Callable, Sequence

from tests.support.tracegen.case import Case
from tests.support.tracegen.orders import SCHEDULES, V_SHAPED, valid
from tests.support.tracegen.shapes import OP_SHAPES

MAX_WORLD = 16
#: default budget of ranks x stages per rank x microbatches x steps (CI's size)
CI_BUDGET = 256


class Chooser:
    """What build_case draws with: integers(lo, hi), sample(seq), boolean()."""

    def __init__(self, integers: Callable[[int, int], int], sample: Callable[[Sequence], object]):
        self.integers, self.sample = integers, sample

    def boolean(self) -> bool:
        return bool(self.integers(0, 1))

    def maybe(self, lo: int, hi: int) -> int | None:
        return None if self.boolean() else self.integers(lo, hi)


def build_case(ch: Chooser, schedules: Sequence[str] = SCHEDULES, p2p: Sequence[str] = ("gloo", "nccl"),
               annotated: Sequence[bool] = (False, True), max_pp: int = 8,
               budget: int = CI_BUDGET, step_marks: Sequence[bool] = (False, True),
               one_rank_files: bool = True) -> Case:
    """A case: schedule, P 2..8, v 1..4 (as the schedule allows), M 1..4P (as it accepts, and
    P·v·M within ``budget``), grid, annotations, P2P kind, op shapes, heavy stages and chunks, a
    descheduled op, steps, what the user states. ``step_marks``: with ``ProfilerStep`` marks,
    without, or either; ``one_rank_files``: whether a case may be one rank's file."""
    schedule = ch.sample(list(schedules))
    pp = ch.integers(2, max_pp)
    if schedule in ("gpipe", "1f1b"):
        v = 1
    elif schedule in V_SHAPED:
        v = 2
    else:
        v = ch.integers(1, 4)
    ms = [m for m in range(1, 4 * pp + 1) if valid(schedule, pp, v, m) and pp * v * m <= budget]
    if not ms:  # dualpipev's smallest M (2P) over the budget: the smallest it accepts
        ms = [min(m for m in range(1, 4 * pp + 1) if valid(schedule, pp, v, m))]
    m = ch.sample(ms)
    room = max(1, budget // (pp * v * m))
    steps = ch.integers(1, max(1, min(3, room)))
    room = max(1, room // steps)
    dp = ch.integers(1, max(1, min(3, MAX_WORLD // pp, room)))
    tp = ch.integers(1, max(1, min(2, MAX_WORLD // (pp * dp), room // dp)))
    n_stages = pp * v
    world = pp * dp * tp
    one_rank = ch.maybe(0, world - 1) if ch.integers(0, 3) == 0 and one_rank_files else None
    p2p_kind = ch.sample(list(p2p))
    return Case(
        schedule=schedule, pp=pp, v=v, m=m, steps=steps, dp=dp, tp=tp,
        grid=ch.sample(["pp-outer", "dp-outer"]),
        # unnamed groups say nothing of TP peers (no TP collectives are drawn) nor of a lone
        # rank's pipeline: the truth would not be in the traces
        # (nor, on GPU traces, whose SendRecv kernels carry no peer here, of any replica)
        named_groups=ch.boolean() or tp > 1 or (world > pp and (one_rank is not None or p2p_kind == "nccl")),
        annotated=ch.sample(list(annotated)),
        p2p=p2p_kind,
        batched=ch.boolean(),
        profiler_steps=ch.boolean() if len(set(step_marks)) == 2 else bool(step_marks[0]),
        optimizer=ch.boolean(),
        batch_split=ch.boolean(),
        op_shape=ch.sample(list(OP_SHAPES)),
        layers=ch.integers(1, 3),
        nested=ch.boolean(),
        loss=ch.boolean(),
        data_load=ch.boolean(),
        heavy_stage=ch.maybe(0, n_stages - 1),
        heavy_chunk=ch.maybe(0, v - 1) if v > 1 else None,
        heavy_factor=ch.sample([1.5, 2.0, 3.0, 4.0]),
        heavy_by_layers=ch.boolean(),
        deschedule=ch.sample([None, "compute", "prep"]),
        one_rank=one_rank,
        shuffle=ch.boolean(),
        state_steps=ch.boolean(),
        state_microbatches=ch.boolean(),
        latency_us=ch.sample([5.0, 30.0, 200.0]),
        seed=ch.integers(0, 2**31 - 1),
        engine_glue=ch.boolean(),
    )


def cases(**kw):
    """The hypothesis strategy of build_case (keywords as build_case's)."""
    from hypothesis import strategies as st

    @st.composite
    def _cases(draw):
        return build_case(Chooser(lambda a, b: draw(st.integers(a, b)),
                                  lambda seq: draw(st.sampled_from(seq))), **kw)

    return _cases()


def random_case(rng: random.Random, **kw) -> Case:
    """build_case drawn with a seeded random.Random."""
    return build_case(Chooser(rng.randint, rng.choice), **kw)
