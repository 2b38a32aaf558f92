"""Steps and microbatches across ranks, and the evidence they came from.

Each rank has already put its actions into its own step windows where it has any
(``ProfilerStep#N`` spans, else the optimizer's ``Optimizer.step#…``:
:mod:`pipeaudit.timeline.steps`), and annotated actions carry their microbatch numbers.
What is left is the ranks whose actions were inferred from the ops without a window: their
F and B are numbered by execution order over the whole trace, and M (hence the steps) must
be found. In order of trust:

1. the ranks that have step windows (M = forwards per step there);
2. the schedule's step boundary: on the first and last stage torch splits the batch into
   microbatches (``aten::tensor_split``) at the start of every ``schedule.step()``;
3. what the user or the harness stated: ``--steps N``, ``--microbatches M``, the manifest;
4. the periodicity of the action sequence: the largest k such that every rank's F/B
   sequence is k copies of one valid schedule order for its stage (GPipe, 1F1B or naive
   with M = forwards / k).

Annotated actions without windows belong to step k at their k-th occurrence (the schedule
repeats once per step). The evidence is reported with the result.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import polars as pl

from pipeaudit.errors import ScheduleError
from pipeaudit.timeline.rank import RankTimeline

OCCURRENCE_EVIDENCE = "the k-th occurrence of each annotated action"
SPLIT_EVIDENCE = "the schedule's batch split (aten::tensor_split) on the first stage"
PERIODICITY_EVIDENCE = "the periodicity of the F/B sequence"
SINGLE_STEP_EVIDENCE = "none (the whole trace taken as one step)"
#: Schedules with one stage per rank whose order inference can check (eager 1F1B: torch's
#: interleaved 1F1B at one chunk per rank).
SINGLE_STAGE_SCHEDULES = ("gpipe", "1f1b", "naive", "eager-1f1b")


@dataclass
class StepDecision:
    """How steps were found, and M for the inferred ranks when it had to be decided."""

    evidence: str
    num_microbatches: int | None = None
    notes: tuple[str, ...] = ()
    #: the inferred ranks' steps rest on the M or the steps the user stated
    from_stated: bool = False
    #: why the steps of the ranks without step marks are a guess nothing settles ("": they are not)
    undecided: str = ""


def settle_steps(ranks: Sequence[RankTimeline], *, positions: dict[int, int], num_stages: int,
                 stated_microbatches: int | None = None, stated_steps: int | None = None,
                 manifest_microbatches: int | None = None) -> StepDecision:
    """Renumber the inferred ranks without windows (in place) and say what steps rest on.

    ``positions``: rank -> its stage position in its pipeline; ``num_stages``: P."""
    with_actions = [rt for rt in ranks if rt.actions.height]
    windowed = [rt for rt in with_actions if rt.step_evidence is not None]
    loose = [rt for rt in with_actions if rt.step_evidence is None and rt.source == "inferred"]
    annotated_loose = [rt for rt in with_actions if rt.step_evidence is None and rt.source != "inferred"]
    evidences = sorted({rt.step_evidence for rt in windowed})
    notes: list[str] = []
    if not loose:
        if windowed and annotated_loose:
            return StepDecision(" and ".join(evidences) + f" (ranks without: {OCCURRENCE_EVIDENCE})")
        if windowed:
            return StepDecision(" and ".join(evidences))
        return StepDecision(OCCURRENCE_EVIDENCE if annotated_loose else SINGLE_STEP_EVIDENCE)

    m, evidence = None, None
    per_step = [_forwards_per_step(rt) for rt in windowed if rt.source == "inferred"]
    per_step += [int(rt.actions["microbatch"].max()) + 1 for rt in windowed + annotated_loose
                 if rt.source != "inferred"]
    if per_step:
        m, evidence = max(set(per_step), key=per_step.count), " and ".join(evidences) or OCCURRENCE_EVIDENCE
        if len(set(per_step)) > 1:
            told = stated_microbatches or manifest_microbatches
            if told in per_step:
                m = told
            notes.append(f"the ranks' steps hold different numbers of forwards "
                         f"({', '.join(map(str, sorted(set(per_step))))}); M = {m} is taken")
    if m is None:
        m = _from_splits(loose)
        evidence = SPLIT_EVIDENCE if m else None
    per_rank: dict[int, int] = {}
    if m is None and stated_steps:
        # the steps are the same on every rank; a rank holding v chunks runs v M forwards a step
        per_rank = {rt.rank: max(1, _forward_count(rt) // stated_steps) for rt in loose}
        m, evidence = max(per_rank.values()), "--steps"
    elif m is None and stated_microbatches:
        per_rank = {rt.rank: _per_step_for_stated_m(rt, stated_microbatches) for rt in loose}
        m, evidence = stated_microbatches, "--microbatches"
    if m is None and manifest_microbatches:
        m, evidence = manifest_microbatches, "the harness manifest's num_microbatches"
    undecided = ""
    if m is None:
        m, one_each = _from_periodicity(loose, positions, num_stages)
        if m is not None:
            evidence = PERIODICITY_EVIDENCE
        if one_each:
            undecided = ("its forwards and backwards alternate one by one and nothing marks its "
                         "steps: one microbatch a step, or several a step of a schedule that "
                         "alternates them (naive, a last stage's 1F1B); --steps or "
                         "--run-microbatches settles it")
    if m is None:
        notes.append("steps not found (no ProfilerStep, optimizer annotation, batch split or "
                     "repeating order): the whole trace is taken as one step; give --steps N")
        if any(_repeats(_kinds(rt)) for rt in loose):
            undecided = ("its F/B sequence repeats itself, as steps do, but in no order of a "
                         "known schedule, and nothing marks its steps: one step or several; "
                         "--steps settles it")
        return StepDecision(SINGLE_STEP_EVIDENCE, None, tuple(notes), undecided=undecided)
    for rt in loose:
        rt.actions = _chunk(rt.actions, per_rank.get(rt.rank, m))
    stated = evidence in ("--steps", "--microbatches")
    return StepDecision(evidence or SINGLE_STEP_EVIDENCE, m, tuple(notes), stated, undecided)


def _is_copies(seq: str, k: int) -> bool:
    """Whether ``seq`` is ``k`` copies of one sequence."""
    return len(seq) % k == 0 and seq == seq[: len(seq) // k] * k


def _repeats(seq: str) -> bool:
    """Whether ``seq`` is two or more copies of one shorter sequence."""
    return any(_is_copies(seq, k) for k in range(2, len(seq) // 2 + 1))


def _forward_count(rt: RankTimeline) -> int:
    return int((rt.actions["kind"] == "F").sum())


def _per_step_for_stated_m(rt: RankTimeline, m: int) -> int:
    """Forwards per step on a rank of stated M: k steps of v M forwards each. Several (k, v)
    divide the count (36 forwards at M = 12: three steps of one chunk, or one of three); the
    steps repeat one order, so the most steps whose order repeats k times are taken, and one
    step of every chunk where no k > 1 repeats (the chunks are told apart later)."""
    n = _forward_count(rt)
    if n == 0 or n % m:
        return m
    seq = _kinds(rt)
    for k in range(n // m, 1, -1):  # the most steps first
        if n % k or (n // k) % m:
            continue
        if _is_copies(seq, k):
            return n // k
    return n


def _forwards_per_step(rt: RankTimeline) -> int:
    f = rt.actions.filter(pl.col("kind") == "F")
    counts = f.group_by("step").len()["len"].to_list()
    return max(set(counts), key=counts.count) if counts else 0


def _chunk(actions: pl.DataFrame, m: int) -> pl.DataFrame:
    """The i-th action of a kind (execution order) is microbatch i % M of step i // M. Where
    a stage runs other than one backward per forward (a split backward read from the ops, its
    I and W alike), its forwards, M a step, set the steps, and each step holds an equal share
    of its backwards (the split fit tells their microbatches apart)."""
    order = (pl.col("host_start").rank("ordinal").over(["stage", "kind"]) - 1).cast(pl.Int64)
    counts = actions.group_by("stage", "kind").len()
    forwards = dict(counts.filter(pl.col("kind") == "F").select("stage", "len").iter_rows())
    shares = {}
    for stage, n in counts.filter(pl.col("kind") == "B").select("stage", "len").iter_rows():
        f = forwards.get(stage, 0)
        if n != f and f and not f % m and not n % (f // m):
            shares[stage] = n // (f // m)
    share = pl.lit(m, dtype=pl.Int64)
    if shares:
        share = (pl.when(pl.col("kind") == "B")
                 .then(pl.col("stage").replace_strict(shares, default=m, return_dtype=pl.Int64))
                 .otherwise(share))
    return actions.with_columns(step=order // share, microbatch=order % share,
                                profiler_step=pl.lit(None, dtype=pl.Int64))


def _from_splits(loose: Sequence[RankTimeline]) -> int | None:
    """M from the ranks whose batch splits cut their forwards into equal steps."""
    found = []
    for rt in loose:
        marks = np.asarray(sorted(rt.split_marks), dtype=np.int64)
        if marks.size == 0:
            continue
        f = np.sort(rt.actions.filter(pl.col("kind") == "F")["host_start"].to_numpy())
        if f.size == 0 or f[0] < marks[0]:
            continue  # forwards before the first split: the marks do not start the steps
        counts = np.diff(np.searchsorted(f, np.concatenate([marks, [np.iinfo(np.int64).max]])))
        counts = counts[counts > 0]
        if counts.size and (counts == counts[0]).all():
            found.append(int(counts[0]))
    return found[0] if found and all(x == found[0] for x in found) else None


def _kinds(rt: RankTimeline) -> str:
    a = rt.actions.sort("host_start")
    return "".join(a["kind"].to_list())


@lru_cache(maxsize=4096)
def _valid_orders(stage: int, num_stages: int, m: int) -> frozenset[str]:
    from pipeaudit.schedules import build_schedule

    out = set()
    for name in SINGLE_STAGE_SCHEDULES:
        try:
            sched = build_schedule(name, num_stages, m)
        except ScheduleError:
            continue
        if stage < len(sched.orders):
            out.add("".join(a.kind for a in sched.orders[stage]))
    return frozenset(out)


def _from_periodicity(loose: Sequence[RankTimeline], positions: dict[int, int],
                      num_stages: int) -> tuple[int | None, bool]:
    """(M, ambiguous): the largest number of steps k such that every rank's F/B sequence is
    k copies of a valid order for its stage; ambiguous when M = 1 fits (naive looks so)."""
    seqs = {rt.rank: _kinds(rt) for rt in loose}
    counts = {s.count("F") for s in seqs.values()}
    if len(counts) != 1 or num_stages < 1:
        return None, False
    n = counts.pop()
    if n == 0:
        return None, False
    for k in range(n, 0, -1):
        if n % k:
            continue
        m = n // k
        if all(_is_copies(seq, k) and positions.get(rank) is not None
               and seq[: len(seq) // k] in _valid_orders(positions[rank], num_stages, m)
               for rank, seq in seqs.items()):
            return m, m == 1 and n > 1
    return None, False
