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

Where no order fits action for action, one read backward may hold a run of the order's
back-to-back backwards (a W and the next W, an I and its W, with nothing between them to part
them). The forwards still pair one to one, so the backward runs between them do too; a run of L
backwards read as l < L actions is parted where the order says a backward hands a gradient to
another rank (its send parts it from the next); where that leaves several ways, the one whose
read actions' compute matches the sums of what their backwards compute where read alone, if it
is clearly the best; else the reading is uncertain. Each read action becomes the first backward
of its run, with its compute; the others are put back, with none, at its end (before the
next read action, which may start a rounding earlier).

One fit relabels every action (kind, stage, microbatch). Several fits that give different
readings (other v, M or kinds) are not told apart: the reading is uncertain. The schedule
stated with ``--schedule`` is kept where it fits.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations
from math import comb
from typing import NamedTuple

import numpy as np
import polars as pl

from pipeaudit.errors import ScheduleError
from pipeaudit.schedules import SCHEDULE_NAMES, build_schedule
from pipeaudit.schedules.catalogue import CATALOGUE, chunks_for
from pipeaudit.timeline.invariants import handed_on, hands_on
from pipeaudit.timeline.rank import RankTimeline
from pipeaudit.timeline.virtual import MAX_CHUNKS, MAX_FORWARDS, kinds_per_position

#: The catalogue's schedules that split a backward into I and W.
SPLIT_SCHEDULES = tuple(nm for nm in SCHEDULE_NAMES if "I" in CATALOGUE[nm].kinds)

#: A position's read actions in a step as runs of the order's actions: the i-th read action is
#: the kept order's actions ``groups[i]`` (one each, where the order fits action for action).
Groups = tuple[tuple[int, ...], ...]


class Fit(NamedTuple):
    """A split-backward schedule whose order is every position's read order."""

    name: str
    v: int
    m: int
    drop_first_i: bool  #: the first stage's Is run no op and are not read
    sched: object  #: the built :class:`pipeaudit.schedules.model.Schedule`
    #: position -> its read actions as runs of the order's (None: action for action everywhere)
    groups: dict[int, Groups] | None = None
    #: the read backwards could be runs of the order's in several ways: the labels are not told
    ambiguous: bool = False


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
    return bool(kinds and _sent_fits(kinds, num_positions, sends,
                                     _computes(inferred, positions)))


def _inferred_with_actions(ranks: Sequence[RankTimeline]) -> list[RankTimeline]:
    """The ranks with actions, if every one of them was read from its ops (else none)."""
    with_actions = [rt for rt in ranks if rt.actions.height]
    return [] if any(rt.source != "inferred" for rt in with_actions) else with_actions


def _sent_fits(kinds: dict[int, tuple[str, ...]], num_positions: int,
               sends: dict[int, float], computes: dict[int, np.ndarray]) -> list[Fit]:
    """The split-backward fits of the positions' orders (:func:`_fits`) that send what they
    hand to other ranks; none where positions run different numbers of forwards."""
    forwards = {k.count("F") for k in kinds.values()}
    if len(forwards) != 1 or not 1 <= min(forwards) <= MAX_FORWARDS:
        return []
    return [f for f in _fits(forwards.pop(), num_positions, kinds, computes)
            if _sends_suffice(f.sched, sends)]


def _computes(ranks: Sequence[RankTimeline], positions: dict[int, int]) -> dict[int, np.ndarray]:
    """Position -> each read action's compute (ns) in a step, the median over its steps and
    ranks (each position's actions run in one order every step: kinds_per_position)."""
    per: dict[int, list[np.ndarray]] = {}
    for rt in ranks:
        acts = rt.actions.filter(pl.col("step") >= 0).sort("step", "start")
        steps = acts["step"].n_unique()
        if steps and acts.height % steps == 0:
            per.setdefault(positions[rt.rank], []).append(
                acts["compute_ns"].fill_null(0).to_numpy().reshape(steps, -1))
    return {p: np.median(np.vstack(tables), axis=0) for p, tables in per.items()
            if len({t.shape[1] for t in tables}) == 1}


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
    fits = _sent_fits(kinds, num_positions, sends, _computes(with_actions, positions))
    if not fits:
        return None, False
    chosen = next((f for f in fits if f.name == stated), None)
    readings = {_reading_key(f) for f in fits}
    if chosen is None and len(readings) > 1:
        shown = ", ".join(sorted({f"{f.name} v={f.v} M={f.m}" for f in fits}))
        return (f"split backwards not told apart: every rank's order of forwards and backwards "
                f"fits {shown} (state the schedule with --run-schedule and M with "
                "--run-microbatches)"), True
    fit = chosen or fits[0]
    if fit.ambiguous:
        return (f"split backwards not told apart: every rank's forwards and backwards run in "
                f"{fit.name}'s order with v={fit.v} chunks and M={fit.m} if some read backwards "
                "each hold several of the order's back-to-back backwards, but which ones the "
                "order does not say (--action-pattern settles it)"), True
    for rt in with_actions:
        pos = positions[rt.rank]
        _relabel(rt, fit.sched.orders[pos], fit.drop_first_i,
                 fit.groups[pos] if fit.groups else None)
    empty = " (the first stage's I runs no op: put back with no compute)" if fit.drop_first_i else ""
    merged = ""
    if fit.groups:
        runs = sum(len(g) > 1 for gs in fit.groups.values() for g in gs)
        merged = (f"; {runs} read backward action{'s' if runs > 1 else ''} a step "
                  f"{'each hold' if runs > 1 else 'holds'} a run of the order's back-to-back "
                  "backwards (the compute counted with the run's first, the others put back with "
                  "none)")
    return (f"split backwards told apart by the order: every rank's forwards and backwards run "
            f"in {fit.name}'s order with v={fit.v} chunks and M={fit.m}{empty}{merged}"), False


def _fits(n: int, P: int, kinds: dict[int, tuple[str, ...]],
          computes: dict[int, np.ndarray]) -> list[Fit]:
    """Every split-backward schedule whose order, backward kinds read alike, is each position's;
    where none is, those that are once read backwards may hold runs of the order's
    back-to-back backwards (:func:`_runs`)."""
    built = []
    for name in SPLIT_SCHEDULES:
        fixed = CATALOGUE[name].fixed_chunks
        for v in ([fixed] if fixed else range(1, min(n, MAX_CHUNKS) + 1)):
            if n % v:
                continue
            try:
                built.append((name, v, build_schedule(name, P, n // v, chunks_for(name, v))))
            except ScheduleError:
                continue
    exact = []
    for name, v, sched in built:
        for drop in (True, False):
            if all(_tokens(sched.orders[p], drop) == k for p, k in kinds.items()):
                exact.append(Fit(name, v, n // v, drop, sched))
                break
    return exact or [f for name, v, sched in built
                     if (f := _merged_fit(name, v, n // v, sched, kinds, computes)) is not None]


def _merged_fit(name: str, v: int, m: int, sched, kinds: dict[int, tuple[str, ...]],
                computes: dict[int, np.ndarray]) -> Fit | None:
    """The fit of ``sched`` whose read backwards hold runs of its order's (:func:`_runs`),
    the first stage's Is read as nothing tried first; None where neither way fits."""
    placement = np.asarray(sched.placement)
    for drop in (True, False):
        groups, ambiguous = {}, False
        for p, k in kinds.items():
            kept = _kept(sched.orders[p], drop)
            runs = _runs(kept, k, np.flatnonzero(placement == p), placement.size - 1,
                         computes.get(p))
            if runs is None:
                break
            ambiguous = ambiguous or runs == "ambiguous"
            groups[p] = runs
        else:
            if ambiguous:
                return Fit(name, v, m, drop, sched, None, True)
            return Fit(name, v, m, drop, sched, groups)
    return None


def _runs(kept, read: tuple[str, ...], held: np.ndarray, last: int,
          compute: np.ndarray | None = None) -> Groups | str | None:
    """``read`` (one position's F / B tokens in a step) as runs of the order ``kept``: the
    forwards one to one, each read backward a run of the order's back-to-back backwards,
    parted after every backward that hands a gradient to another rank (a stage not in
    ``held``, of stages 0..``last``: its send lies between it and the next). Where that leaves
    several ways, the one whose read actions' ``compute`` (per read action) best matches what
    each (stage, kind) computes where it is read alone, if clearly best. None where no way
    fits, "ambiguous" where several do."""
    order_f = [i for i, a in enumerate(kept) if a.kind == "F"]
    if read.count("F") != len(order_f) or len(read) > len(kept):
        return None
    bounds = [-1, *order_f, len(kept)]
    hands = hands_on(np.array([a.stage for a in kept], dtype=np.int64),
                     np.array([a.kind for a in kept], dtype="U1"), held, last)
    parts: list = []
    for k, count in enumerate(_gaps(read)):
        ways = _ways(list(range(bounds[k] + 1, bounds[k + 1])), count, hands)
        if not ways:
            return None
        parts.append(ways)
        if k < len(order_f):
            parts.append([[(order_f[k],)]])
    if any(len(w) > 1 for w in parts):
        chosen = _by_compute(parts, kept, compute)
        if chosen is None:
            return "ambiguous"
        parts = [[w] for w in chosen]
    return tuple(g for ways in parts for g in ways[0])


def _gaps(read: tuple[str, ...]) -> list[int]:
    """How many backwards come before the first forward, between each two and after the last."""
    gaps = [0]
    for t in read:
        if t == "F":
            gaps.append(0)
        else:
            gaps[-1] += 1
    return gaps


#: Most ways of parting one run that are weighed by compute (more: the reading is uncertain).
MAX_WAYS = 256


def _ways(run: list[int], count: int, hands: np.ndarray) -> list[list[tuple[int, ...]]]:
    """Every way of reading the order's backwards ``run`` as ``count`` actions, each a run of
    back-to-back backwards ending wherever a backward hands its gradient to another rank
    (``hands``, per action of the order; none where there is none or too many to weigh)."""
    if count == len(run):
        return [[(i,) for i in run]]
    if count == 0 or count > len(run):
        return []
    must = {j for j in range(len(run) - 1) if hands[run[j]]}
    free = [j for j in range(len(run) - 1) if j not in must]
    need = count - 1 - len(must)
    if need < 0 or need > len(free) or comb(len(free), need) > MAX_WAYS:
        return []
    out = []
    for extra in combinations(free, need):
        cuts = must | set(extra)
        groups, cur = [], []
        for j, i in enumerate(run):
            cur.append(i)
            if j in cuts or j == len(run) - 1:
                groups.append(tuple(cur))
                cur = []
        out.append(groups)
    return out


#: A way of parting runs is taken by compute only if the next best misses by this many times more.
CLEARLY_BEST = 2.0


def _by_compute(parts: list, kept, compute: np.ndarray | None) -> list | None:
    """One way per run (``parts``: each run's ways, in read order), the one whose read actions'
    compute best matches the sum of what their (stage, kind)s compute where read alone (a
    single way's lone actions, the median); None without compute, where an action's (stage,
    kind) is never read alone, or where no way is clearly best."""
    if compute is None or compute.size != sum(len(w[0]) for w in parts):
        return None
    alone: dict[tuple[int, str], list[float]] = {}
    i = 0
    for ways in parts:
        for g in ways[0]:
            if len(ways) == 1 and len(g) == 1:
                alone.setdefault((kept[g[0]].stage, kept[g[0]].kind), []).append(compute[i])
            i += 1
    typical = {key: float(np.median(v)) for key, v in alone.items()}
    chosen, i = [], 0
    for ways in parts:
        n = len(ways[0])
        if len(ways) > 1:
            misses = []
            for way in ways:
                try:
                    want = np.array([sum(typical[(kept[j].stage, kept[j].kind)] for j in g)
                                     for g in way])
                except KeyError:
                    return None
                misses.append(float(np.abs(compute[i:i + n] - want).sum()))
            ranked = sorted(range(len(ways)), key=misses.__getitem__)
            if not misses[ranked[1]] > CLEARLY_BEST * misses[ranked[0]]:
                return None
            chosen.append(ways[ranked[0]])
        else:
            chosen.append(ways[0])
        i += n
    return chosen


def _kept(order, drop_first_i: bool) -> list:
    """The order's actions a reading holds: all, or all but the first stage's Is (which run no
    op where the first stage's input needs no gradient)."""
    return [a for a in order if not (drop_first_i and a.kind == "I" and a.stage == 0)]


def _tokens(order, drop_first_i: bool) -> tuple[str, ...]:
    return tuple("F" if a.kind == "F" else "B" for a in _kept(order, drop_first_i))


def _reading_key(fit: Fit) -> tuple:
    """What a fit says each action is: the same for schedules whose orders coincide."""
    groups = tuple(sorted(fit.groups.items())) if fit.groups else None
    return (fit.v, fit.m, fit.drop_first_i, fit.ambiguous, groups,
            tuple(tuple((a.stage, a.kind, a.microbatch) for a in o) for o in fit.sched.orders))


def _relabel(rt: RankTimeline, order, drop_first_i: bool, groups: Groups | None = None) -> None:
    """Each step's i-th action (by start) becomes the order's i-th (stage, kind, microbatch), or
    the first of its run ``groups[i]``; the first stage's Is without ops and the rest of each
    run are put back with no compute."""
    kept = _kept(order, drop_first_i)
    groups = groups or tuple((i,) for i in range(len(kept)))
    first = [kept[g[0]] for g in groups]
    stages = np.array([a.stage for a in first], dtype=np.int64)
    kinds = np.array([a.kind for a in first])
    mbs = np.array([a.microbatch for a in first], dtype=np.int64)
    ranked = rt.actions.with_row_index("_row").with_columns(
        _i=(pl.col("start").rank("ordinal").over("step") - 1).cast(pl.Int64))
    i = ranked["_i"].to_numpy()
    actions = ranked.with_columns(
        stage=pl.Series(stages[i]), kind=pl.Series(kinds[i]), microbatch=pl.Series(mbs[i]),
    ).sort("_row").drop("_i")
    rt.stage_from_rank = False
    if len(first) == len(order):
        rt.actions = actions.drop("_row")
        return
    rt.actions = _with_empty_actions(rt, actions, _put_back(order, kept, groups))


def _put_back(order, kept, groups: Groups) -> list[tuple[object, int, str]]:
    """The order's actions no read action stands for, each as (action, the step's read action
    it is put at, "start" or "end"): the rest of a run at the end of the run's read action; a
    dropped I at the start of the next read action in the order (else the end of the last)."""
    read_at = {id(kept[g[0]]): i for i, g in enumerate(groups)}
    out = [(kept[j], i, "end") for i, g in enumerate(groups) for j in g[1:]]
    dropped = {id(a) for a in order} - {id(a) for a in kept}
    for j, a in enumerate(order):
        if id(a) not in dropped:
            continue
        after = next((read_at[id(b)] for b in order[j + 1:] if id(b) in read_at), None)
        if after is not None:
            out.append((a, after, "start"))
        else:
            out.append((a, max(read_at[id(b)] for b in order[:j] if id(b) in read_at), "end"))
    return out


def _with_empty_actions(rt: RankTimeline, actions: pl.DataFrame,
                        put_back: list[tuple[object, int, str]]) -> pl.DataFrame:
    """``actions`` (with ``_row``, the action id) plus, every step, the actions ``put_back``
    (:func:`_put_back`) with no compute; the action ids renumbered by start and the compute
    tables with them."""
    rows = []
    by_step = {s: g.sort("start") for (s,), g in actions.filter(pl.col("step") >= 0)
               .group_by("step", maintain_order=True)}
    for g in by_step.values():
        starts = g["start"].to_list()
        for a, at, edge in put_back:
            ref = g.row(at, named=True)
            t, host = ref[edge], ref[f"host_{edge}"]
            if edge == "end" and at + 1 < len(starts):  # before the next read action, which
                t = min(t, starts[at + 1])  # may start a rounding before this one's end
            rows.append({**ref, "stage": a.stage, "kind": a.kind, "microbatch": a.microbatch,
                         "start": t, "end": t, "compute_ns": 0, "compute_start": t,
                         "compute_end": t, "host_start": host, "host_end": host, "_row": None})
    if not rows:
        return actions.drop("_row")
    added = pl.DataFrame(rows, schema=actions.schema, orient="row")
    # an added action sorts before a read one of the same start (the order's)
    both = pl.concat([added.with_columns(_put=pl.lit(0)), actions.with_columns(_put=pl.lit(1))])
    both = both.sort(["start", "_put"], maintain_order=True)
    new_id = {int(o): k for k, o in enumerate(both["_row"].to_list()) if o is not None}
    for name in ("compute", "device_compute"):
        table = getattr(rt, name)
        if table is not None and table.height:
            setattr(rt, name, table.with_columns(
                pl.col("action").replace_strict(new_id, return_dtype=pl.Int64)))
    return both.drop("_row", "_put")
