"""Virtual stages of un-annotated traces: which chunk each inferred action ran, from the order.

Megatron-core's interleaved 1F1B (and torch's, unannotated) holds v chunks per rank: rank r runs
stages r, P + r, ..., (v-1)P + r. Inferred actions carry only their kind and their order on the
rank, and a chunk's forward is the same ops as the other chunks' when the layers are alike. The
schedule's order tells them apart: the sequence of kinds (F, B) a rank runs in a step differs
between 1F1B over vM microbatches and an interleaved schedule of v chunks over M microbatches
(their warm-ups differ). When no one-stage schedule of the catalogue runs the observed kinds at
every stage position, the interleaved schedules of the catalogue are tried for every v that
divides the forwards per step; the first whose every position's kinds equal the observed ones
names each action's stage and microbatch. Steps must be known (windows or settled steps).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from pipeaudit.errors import ScheduleError
from pipeaudit.schedules import SCHEDULE_NAMES, build_schedule
from pipeaudit.schedules.catalogue import CATALOGUE
from pipeaudit.timeline.rank import RankTimeline

#: Forwards per step beyond which no split is tried (the search builds schedules per divisor).
MAX_FORWARDS = 4096
#: Chunks per rank tried at most (each divisor builds every interleaved schedule of the
#: catalogue: without a bound a rank of thousands of forwards took minutes).
MAX_CHUNKS = 8


def kinds_per_position(ranks: Sequence[RankTimeline], positions: dict[int, int]
                        ) -> dict[int, tuple[str, ...]] | None:
    """Each position's kind sequence in a step (the same in every step), or None."""
    out: dict[int, tuple[str, ...]] = {}
    for rt in ranks:
        pos = positions.get(rt.rank)
        if pos is None:
            return None
        acts = rt.actions.sort("start")
        seqs = {tuple(g["kind"].to_list()) for _, g in acts.group_by("step", maintain_order=True)}
        if len(seqs) != 1:
            return None
        seq = seqs.pop()
        if out.setdefault(pos, seq) != seq:
            return None
    return out


def _fits(name: str, P: int, M: int, v: int, kinds: dict[int, tuple[str, ...]]):
    try:
        sched = build_schedule(name, P, M, v if v > 1 else None)
    except ScheduleError:
        return None
    if any(tuple(a.kind for a in sched.orders[p]) != k for p, k in kinds.items()):
        return None
    return sched


def split_virtual_stages(ranks: Sequence[RankTimeline], positions: dict[int, int],
                         num_positions: int, *, looped: bool | None = False,
                         stated: str | None = None, stated_microbatches: int | None = None,
                         grads_back: dict[int, int] | None = None) -> tuple[str | None, bool]:
    """Relabel the inferred actions' stages and microbatches (in place) when the kinds follow
    an interleaved schedule and no one-stage schedule; returns a note saying so (or None) and
    whether the kinds fit several chunk counts that nothing settles (the reading is then
    uncertain).
    ``looped``: True where the first position sends gradients back or the last sends
    activations on (it holds another stage too), so no one-stage schedule ran, whatever the
    kinds; None where neither position's trace is read (one rank's file of a middle stage):
    kinds that fit a one-stage schedule and an interleaved one are then ambiguous;
    ``stated``: the schedule the user says ran (``--schedule``), tried first and, when it
    holds several stages per rank, instead of every one-stage schedule;
    ``stated_microbatches``: the M the user says ran (of the fits, those of that M are kept;
    one stage over another M is no fit); ``grads_back``: first-position rank -> gradients it
    sent back (a rank of v chunks sends (v - 1)·M a step: of the chunk counts the order fits,
    the one they give is kept)."""
    with_actions = [rt for rt in ranks if rt.actions.height]
    if not with_actions or any(rt.source != "inferred" for rt in with_actions):
        return None, False
    kinds = kinds_per_position(with_actions, positions)
    if not kinds:
        return None, False
    forwards = {k.count("F") for k in kinds.values()}
    if len(forwards) != 1:
        return None, False
    n = forwards.pop()
    if n < 2 or n > MAX_FORWARDS or any(set(k) - {"F", "B"} for k in kinds.values()):
        return None, False
    P = num_positions
    one_stage = [nm for nm in SCHEDULE_NAMES if CATALOGUE[nm].fixed_chunks == 1
                 and set(CATALOGUE[nm].kinds) == {"F", "B"}]
    stated_multi = stated in CATALOGUE and CATALOGUE[stated].fixed_chunks != 1
    one_stage_fits = not looped and not stated_multi and any(_fits(nm, P, n, 1, kinds)
                                                             for nm in one_stage)
    if one_stage_fits and (looped is False or stated_microbatches == n):
        return None, False
    if stated_microbatches is not None and stated_microbatches != n:
        one_stage_fits = False  # one stage would run another M than the stated one
    interleaved = [nm for nm in SCHEDULE_NAMES if CATALOGUE[nm].fixed_chunks != 1
                   and CATALOGUE[nm].placement == "loop" and set(CATALOGUE[nm].kinds) == {"F", "B"}]
    if stated_multi and stated in interleaved:
        interleaved = [stated] + [nm for nm in interleaved if nm != stated]
    fits = []  # (v, name, schedule): every chunk count and schedule the kinds allow
    for v in range(2, min(n, MAX_CHUNKS) + 1):
        if n % v:
            continue
        for name in interleaved:
            sched = _fits(name, P, n // v, v, kinds)
            if sched is not None:
                fits.append((v, name, sched))
    if stated_microbatches is not None:
        fits = [f for f in fits if n // f[0] == stated_microbatches] or fits
    if not fits:
        return None, False
    if one_stage_fits:
        # neither end of the pipeline is read: one stage over M = n or chunks, nothing tells
        shown = ", ".join(f"v={v} M={n // v}" for v in sorted({v for v, _, _ in fits}))
        return (f"virtual stages not told apart: every rank's F/B sequence fits one stage with "
                f"M={n} and {shown}, and no trace of the first or last stage position says "
                "which (state the schedule with --run-schedule)"), True
    fits = _by_gradients_sent(fits, n, with_actions, grads_back or {})
    chunk_counts = sorted({v for v, _, _ in fits})
    stated_fit = next((f for f in fits if f[1] == stated), None)
    if len(chunk_counts) > 1 and stated_fit is None:
        # the kinds alone cannot tell v chunks of M from v' chunks of M': say so, guess none
        shown = ", ".join(f"v={v} M={n // v}" for v in chunk_counts)
        return (f"virtual stages not told apart: every rank's F/B sequence fits {shown} "
                "(state the schedule with --run-schedule and M with --run-microbatches)"), True
    v, name, sched = stated_fit or fits[0]
    for rt in with_actions:
        _relabel(rt, sched.orders[positions[rt.rank]])
    return (f"virtual stages told apart by the order: every rank's F/B sequence is "
            f"{name}'s with v={v} chunks and M={n // v} (not one stage over M={n})"), False


def _by_gradients_sent(fits: list, n: int, ranks: Sequence[RankTimeline],
                       grads_back: dict[int, int]) -> list:
    """The fits whose M the first position's gradients sent back give, (v - 1)·M a step with
    n = v·M forwards: M = n - sent; all of them where that says nothing or keeps none."""
    per_step = set()
    for rt in ranks:
        if rt.rank in grads_back:
            steps = rt.actions.filter(pl.col("step") >= 0)["step"].n_unique()
            if steps and grads_back[rt.rank] % steps == 0:
                per_step.add(grads_back[rt.rank] // steps)
    if len(per_step) != 1:
        return fits
    m = n - per_step.pop()
    kept = [f for f in fits if n // f[0] == m]
    return kept or fits


def _relabel(rt: RankTimeline, order) -> None:
    """Each step's i-th action (by start) becomes the order's i-th (stage, microbatch)."""
    stages = np.array([a.stage for a in order], dtype=np.int64)
    mbs = np.array([a.microbatch for a in order], dtype=np.int64)
    ranked = rt.actions.with_row_index("_row").with_columns(
        _i=(pl.col("start").rank("ordinal").over("step") - 1).cast(pl.Int64))
    i = ranked["_i"].to_numpy()
    rt.actions = ranked.with_columns(
        stage=pl.Series(stages[i]), microbatch=pl.Series(mbs[i]),
    ).sort("_row").drop("_row", "_i")
    rt.stage_from_rank = False
