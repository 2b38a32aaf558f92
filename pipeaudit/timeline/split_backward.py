"""Split backwards (I and W) read from the ops, told apart by the schedule's order.

A reading of a split backward (:func:`pipeaudit.timeline.infer.infer_actions` with
``calls=True``) finds each rank's forwards and its backward actions, but not which backward
action is an I and which a W, nor which stage each belongs to: on a rank of two stages the ops
are often the same. The schedule's order says it. Every schedule of the catalogue that splits
the backward (zero-bubble, V-shaped, DualPipeV) is built for the job's P, each chunk count v
that divides the forwards per step and M = forwards / v; its order at each stage position,
with every backward kind (B, I, W) read as a backward, must equal what the rank ran, every step.
The first stage's I computes no gradient (its input is data) and runs no op, so the order is
also tried without it; such an I is put back, with no compute, right before the action that
follows it in the order.

One fit relabels every action (kind, stage, microbatch). Several fits that give different
readings (other v, M or kinds) are not told apart: the reading is uncertain. The schedule
stated with ``--schedule`` is kept where it fits.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from pipeaudit.errors import ScheduleError
from pipeaudit.schedules import SCHEDULE_NAMES, build_schedule
from pipeaudit.schedules.catalogue import CATALOGUE, chunks_for
from pipeaudit.timeline.invariants import handed_on
from pipeaudit.timeline.rank import RankTimeline
from pipeaudit.timeline.virtual import MAX_CHUNKS, MAX_FORWARDS, kinds_per_position

#: The catalogue's schedules that split a backward into I and W.
SPLIT_SCHEDULES = tuple(nm for nm in SCHEDULE_NAMES if "I" in CATALOGUE[nm].kinds)


def choose_split_readings(values: list[RankTimeline], positions: dict[int, int],
                          num_positions: int) -> tuple[list[RankTimeline], dict[int, float]]:
    """Each rank's reading of a split backward (:attr:`RankTimeline.split_reading`) replaces
    its plain one when, so replaced, every position's order of forwards and backwards is a
    split-backward schedule's (:func:`fit_split_backward` then tells the kinds apart);
    otherwise the plain readings stand. Every rank drops the reading it does not keep.
    Returns the readings and, for :func:`fit_split_backward`, each position's sends per step
    (read here: the transfers' tags are gone once they are matched)."""
    split = [rt.split_reading if rt.split_reading is not None else rt for rt in values]
    sends = _sends_per_step([rt for rt in split if rt.actions.height], positions)
    use = _plain_falls_short(values, positions) and _fits_any(split, positions, num_positions,
                                                              sends)
    for rt in values:
        rt.split_reading = None
    return (split, sends) if use else (values, {})


def _plain_falls_short(values: Sequence[RankTimeline], positions: dict[int, int]) -> bool:
    """Whether the plain readings leave room for the split ones: some rank's plain reading runs
    other than one backward per forward, positions run different numbers of forwards a step
    (every schedule runs M microbatches through each of a position's v stages), or the split
    readings hold more of the ranks' compute (a plain reading that is whole is kept: one
    rank's file of an interleaved run may also fit a split schedule's order at its position).
    The sends are no such sign: where a plain reading hands on more tensors than the rank sent,
    the split reading may be as wrong (its forwards missing what the step's start-up took), so
    the plain one stands and is doubted for its sends."""
    pairs = [(rt, rt.split_reading) for rt in values if rt.split_reading is not None]
    if not pairs:
        return False
    if any(int((rt.actions["kind"] == "F").sum()) * 2 != rt.actions.height for rt, _ in pairs):
        return True
    inferred = _inferred_with_actions(values)
    kinds = kinds_per_position(inferred, positions) if inferred else None
    if kinds and len({k.count("F") for k in kinds.values()}) > 1:
        return True
    return sum(s.coverage or 0.0 for _, s in pairs) > sum(rt.coverage or 0.0 for rt, _ in pairs)


def _fits_any(ranks: Sequence[RankTimeline], positions: dict[int, int], num_positions: int,
              sends: dict[int, float]) -> bool:
    inferred = _inferred_with_actions(ranks)
    kinds = kinds_per_position(inferred, positions) if inferred else None
    return bool(kinds and _sent_fits(kinds, num_positions, sends))


def _inferred_with_actions(ranks: Sequence[RankTimeline]) -> list[RankTimeline]:
    """The ranks with actions, if every one of them was read from its ops (else none)."""
    with_actions = [rt for rt in ranks if rt.actions.height]
    return [] if any(rt.source != "inferred" for rt in with_actions) else with_actions


def _sent_fits(kinds: dict[int, tuple[str, ...]], num_positions: int,
               sends: dict[int, float]) -> list[tuple]:
    """The split-backward fits of the positions' orders (:func:`_fits`) that send what they
    hand to other ranks; none where positions run different numbers of forwards."""
    forwards = {k.count("F") for k in kinds.values()}
    if len(forwards) != 1 or not 1 <= min(forwards) <= MAX_FORWARDS:
        return []
    return [f for f in _fits(forwards.pop(), num_positions, kinds) if _sends_suffice(f[4], sends)]


def _sends_per_step(ranks: Sequence[RankTimeline], positions: dict[int, int]) -> dict[int, float]:
    """Position -> the fewest sends per step a rank there made (over the trace: its sends over
    its steps); positions whose ranks' transfers are not tagged (GPU traces) are left out."""
    out: dict[int, float] = {}
    for rt in ranks:
        steps = rt.actions.filter(pl.col("step") >= 0)["step"].n_unique()
        if steps and rt.rank in positions and rt.p2p_tags.height:
            sent = int((rt.p2p_tags["dir"] == "send").sum()) / steps
            out[positions[rt.rank]] = min(out.get(positions[rt.rank], sent), sent)
    return out


def _sends_suffice(sched, sends: dict[int, float]) -> bool:
    """Whether every position sent at least what the schedule hands to another rank in a step:
    a forward's output where the next stage is elsewhere, an I's or B's input gradient where
    the previous stage is. A stage of alike layers read as several stages on one rank (no
    transfer between them) asks for sends the trace does not have."""
    placement = np.asarray(sched.placement)
    for p, sent in sends.items():
        order = sched.orders[p]
        need = handed_on(np.array([a.stage for a in order], dtype=np.int64),
                         np.array([a.kind for a in order], dtype="U1"),
                         np.flatnonzero(placement == p), placement.size - 1)
        if sent < need:
            return False
    return True


def fit_split_backward(ranks: Sequence[RankTimeline], positions: dict[int, int], num_positions: int,
                       *, sends: dict[int, float], stated: str | None = None) -> tuple[str | None, bool]:
    """Relabel the inferred actions (in place) when their order is a split-backward schedule's
    and each position sent (``sends``: per step, :func:`choose_split_readings`) what the
    schedule hands to other ranks; returns a note saying which (or None) and whether several
    readings fit (uncertain)."""
    with_actions = _inferred_with_actions(ranks)
    kinds = kinds_per_position(with_actions, positions) if with_actions else None
    if not kinds or any(set(k) - {"F", "B"} for k in kinds.values()):
        return None, False
    if all(k.count("F") == len(k) - k.count("F") for k in kinds.values()):
        return None, False  # one backward per forward: no split backward to read
    fits = _sent_fits(kinds, num_positions, sends)
    if not fits:
        return None, False
    chosen = next((f for f in fits if f[0] == stated), None)
    readings = {_reading_key(f) for f in fits}
    if chosen is None and len(readings) > 1:
        shown = ", ".join(sorted({f"{nm} v={v} M={m}" for nm, v, m, _, _ in fits}))
        return (f"split backwards not told apart: every rank's order of forwards and backwards "
                f"fits {shown} (state the schedule with --run-schedule and M with "
                "--run-microbatches)"), True
    name, v, m, drop_first_i, sched = chosen or fits[0]
    for rt in with_actions:
        _relabel(rt, sched.orders[positions[rt.rank]], drop_first_i)
    empty = " (the first stage's I runs no op: put back with no compute)" if drop_first_i else ""
    return (f"split backwards told apart by the order: every rank's forwards and backwards run "
            f"in {name}'s order with v={v} chunks and M={m}{empty}"), False


def _fits(n: int, P: int, kinds: dict[int, tuple[str, ...]]) -> list[tuple]:
    """(name, v, M, first stage's I dropped, schedule) of every split-backward schedule whose
    order, backward kinds read alike, is each position's."""
    out = []
    for name in SPLIT_SCHEDULES:
        fixed = CATALOGUE[name].fixed_chunks
        for v in ([fixed] if fixed else range(1, min(n, MAX_CHUNKS) + 1)):
            if n % v:
                continue
            try:
                sched = build_schedule(name, P, n // v, chunks_for(name, v))
            except ScheduleError:
                continue
            for drop in (True, False):
                if all(_tokens(sched.orders[p], drop) == k for p, k in kinds.items()):
                    out.append((name, v, n // v, drop, sched))
                    break
    return out


def _tokens(order, drop_first_i: bool) -> tuple[str, ...]:
    return tuple("F" if a.kind == "F" else "B" for a in order
                 if not (drop_first_i and a.kind == "I" and a.stage == 0))


def _reading_key(fit: tuple) -> tuple:
    """What a fit says each action is: the same for schedules whose orders coincide."""
    _, v, m, drop, sched = fit
    return (v, m, drop, tuple(tuple((a.stage, a.kind, a.microbatch) for a in o) for o in sched.orders))


def _relabel(rt: RankTimeline, order, drop_first_i: bool) -> None:
    """Each step's i-th action (by start) becomes the order's i-th (stage, kind, microbatch);
    the first stage's Is without ops are put back with no compute."""
    kept = [a for a in order if not (drop_first_i and a.kind == "I" and a.stage == 0)]
    stages = np.array([a.stage for a in kept], dtype=np.int64)
    kinds = np.array([a.kind for a in kept])
    mbs = np.array([a.microbatch for a in kept], dtype=np.int64)
    ranked = rt.actions.with_row_index("_row").with_columns(
        _i=(pl.col("start").rank("ordinal").over("step") - 1).cast(pl.Int64))
    i = ranked["_i"].to_numpy()
    actions = ranked.with_columns(
        stage=pl.Series(stages[i]), kind=pl.Series(kinds[i]), microbatch=pl.Series(mbs[i]),
    ).sort("_row").drop("_i")
    rt.stage_from_rank = False
    if len(kept) == len(order):
        rt.actions = actions.drop("_row")
        return
    rt.actions = _with_empty_inputs(rt, actions, order, kept)


def _with_empty_inputs(rt: RankTimeline, actions: pl.DataFrame, order, kept) -> pl.DataFrame:
    """``actions`` (with ``_row``, the action id) plus the order's dropped Is, each with no
    compute, at the start of the action after it in the order (else the end of the one
    before); the action ids renumbered by start and the compute tables with them."""
    index = {id(a): k for k, a in enumerate(kept)}
    rows = []
    by_step = {s: g.sort("start") for (s,), g in actions.filter(pl.col("step") >= 0)
               .group_by("step", maintain_order=True)}
    for step, g in by_step.items():
        for j, a in enumerate(order):
            if id(a) in index:
                continue
            after = next((index[id(b)] for b in order[j + 1:] if id(b) in index), None)
            if after is not None:
                ref = g.row(after, named=True)
                t, host = ref["start"], ref["host_start"]
            else:
                before = max(index[id(b)] for b in order[:j] if id(b) in index)
                ref = g.row(before, named=True)
                t, host = ref["end"], ref["host_end"]
            rows.append({**ref, "stage": a.stage, "kind": a.kind, "microbatch": a.microbatch,
                         "start": t, "end": t, "compute_ns": 0, "compute_start": t,
                         "compute_end": t, "host_start": host, "host_end": host, "_row": None})
    if not rows:
        return actions.drop("_row")
    added = pl.DataFrame(rows, schema=actions.schema, orient="row")
    # an added I sorts before the action it was put at (same start): the order's
    both = pl.concat([added.with_columns(_put=pl.lit(0)), actions.with_columns(_put=pl.lit(1))])
    both = both.sort(["start", "_put"], maintain_order=True)
    new_id = {int(o): k for k, o in enumerate(both["_row"].to_list()) if o is not None}
    for name in ("compute", "device_compute"):
        table = getattr(rt, name)
        if table is not None and table.height:
            setattr(rt, name, table.with_columns(
                pl.col("action").replace_strict(new_id, return_dtype=pl.Int64)))
    return both.drop("_row", "_put")
