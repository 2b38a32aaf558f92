"""Which schedule a run ran, its closed-form theory, and where its order leaves the catalogue.

Ranks are read by stage position (``representatives[p]``: the rank read at position p, None
where its trace is missing), so that one rank's file is compared with its own position's
order in the schedule, not with the first rank's.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

import polars as pl

from pipeaudit.actions import Action
from pipeaudit.audit import findings as F
from pipeaudit.audit.result import Finding
from pipeaudit.errors import ScheduleError
from pipeaudit.schedules import SCHEDULE_NAMES, build_schedule, replay, theory
from pipeaudit.schedules.catalogue import CATALOGUE, checked_config, chunks_for, free_chunks
from pipeaudit.schedules.model import flatten_steps
from pipeaudit.timeline.model import Timeline


class _Signature:
    """What detection compares of a catalogue schedule: its placement, its declared action
    kinds and a hash of each rank's order, that rank's order built when first asked for
    (the catalogue builds a schedule rank by rank): a candidate that differs from the
    observed order at its first position observed costs one rank's order, not the whole
    schedule's (a 64-stage schedule of 128 microbatches holds 16,000-50,000 actions; the 15
    candidates took 0.9 s to build). Only the hashes are kept: a 1,024-rank job's detection
    kept every candidate's schedule (about 11 MB) for the rest of the audit, where these
    take a few KB."""

    def __init__(self, canon: str, P: int, M: int, v: int) -> None:
        entry = CATALOGUE[canon]
        self._key = (canon, P, M, v)
        self.placement: tuple[int, ...] = entry.placement_of(P, v)
        self.kinds = frozenset(entry.kinds)
        self.stages_at: dict[int, set[int]] = {}  #: position -> the stages it holds
        for s, p in enumerate(self.placement):
            self.stages_at.setdefault(p, set()).add(s)
        self._hashes: dict[int, int | None] = {}  #: position -> its order's hash (None: no order)

    def order_hash(self, p: int) -> int | None:
        """The hash of position ``p``'s order; None where the schedule cannot build it."""
        if p not in self._hashes:
            canon, P, M, v = self._key
            try:
                flat, _ = flatten_steps(CATALOGUE[canon].orders(P, M, v, p))
                self._hashes[p] = hash(tuple(flat))
            except ScheduleError:
                self._hashes[p] = None
        return self._hashes[p]


@lru_cache(maxsize=256)
def _signature(name: str, P: int, M: int, v: int) -> _Signature | None:
    """The :class:`_Signature` of catalogue schedule ``name`` (None where it cannot run)."""
    try:
        canon, P, M, v = checked_config(name, P, M, chunks_for(name, v))
    except ScheduleError:
        return None
    return _Signature(canon, P, M, v)


def detect_on_positions(orders: dict[int, list], stage_pos: dict[int, int], P: int, M: int,
                        v: int) -> list[str]:
    """Catalogue schedules whose placement and per-position orders equal the observed ones at
    every position present (``orders``: position -> its actions in execution order). Each
    candidate is screened by its :class:`_Signature`: its placement, then what every
    schedule's order at a position holds (an action of every stage placed there, of its
    declared kinds only), then its orders' hashes, a position at a time; one that passes is
    compared in full."""
    if not orders or P < 1:
        return []
    found = []
    observed = {p: tuple(o) for p, o in orders.items()}
    hashes = {p: hash(o) for p, o in observed.items()}  # equal orders hash equal
    stages = {p: {a.stage for a in o} for p, o in observed.items()}
    kinds = {p: {a.kind for a in o} for p, o in observed.items()}
    for name in SCHEDULE_NAMES:
        sig = _signature(name, P, M, v)
        if sig is None or not _may_fit(sig, stage_pos, hashes, stages, kinds):
            continue
        if v == 1 and free_chunks(name) and any(CATALOGUE[f].fixed_chunks == 1 for f in found):
            continue  # a schedule of free chunks at one chunk, where a one-stage one ran its order
        try:
            sched = build_schedule(name, P, M, chunks_for(name, v))
        except ScheduleError:
            continue
        if _fits(sched.placement, sched.orders, stage_pos, observed):
            found.append(name)
    return found


def _may_fit(sig: _Signature, stage_pos: dict[int, int], hashes: dict[int, int],
             stages: dict[int, set[int]], kinds: dict[int, set[str]]) -> bool:
    """Whether the schedule of ``sig`` passes the screens of :func:`detect_on_positions`
    (every observed position counts, as in :func:`_fits`, up to the schedule's ranks)."""
    placement = sig.placement
    if any(s >= len(placement) or placement[s] != p for s, p in stage_pos.items()):
        return False
    shown = [p for p in hashes if p < len(sig.stages_at)]
    if any(not kinds[p] <= sig.kinds or not sig.stages_at[p] <= stages[p] for p in shown):
        return False
    return all(hashes[p] == sig.order_hash(p) for p in sorted(shown))


def _fits(placement: tuple[int, ...], per_rank: tuple, stage_pos: dict[int, int],
          observed: dict[int, object]) -> bool:
    """Whether every observed stage sits at its schedule position and every observed
    position's order equals the schedule's."""
    if any(s >= len(placement) or placement[s] != p for s, p in stage_pos.items()):
        return False
    return all(o == per_rank[p] for p, o in observed.items() if p < len(per_rank))


def first_stage_as_read(order) -> tuple[Action, ...]:
    """A schedule's order as a reading from the ops sees it: the first stage's I computes
    nothing (it has no input to differentiate), so its W reads as that stage's B."""
    return tuple(Action(0, "B", a.microbatch) if a.stage == 0 and a.kind == "W" else a
                 for a in order if not (a.stage == 0 and a.kind == "I"))


def empty_input_twins(orders: dict[int, list], stage_pos: dict[int, int], P: int, M: int,
                      v: int, found: list[str]) -> list[str]:
    """Catalogue schedules that split backwards (I, W), not in ``found``, that run the observed
    orders when the first stage's I is read as nothing and its W as its B. The first stage has
    no input to differentiate, so its I computes nothing and an un-annotated reading sees one
    backward: a file of the first stage alone cannot tell ZB-H1 from 1F1B. Only readings of
    the first stage alone can have such twins (any other stage's I and W are seen)."""
    observed = {p: tuple(o) for p, o in orders.items()}
    if not observed or any(a.stage != 0 or a.kind in ("I", "W")
                           for o in observed.values() for a in o):
        return []
    out = []
    for name in SCHEDULE_NAMES:
        if name in found or "I" not in CATALOGUE[name].kinds:
            continue
        try:
            sched = build_schedule(name, P, M, chunks_for(name, v))
        except ScheduleError:
            continue
        seen = tuple(first_stage_as_read(o) for o in sched.orders)
        if _fits(sched.placement, seen, stage_pos, observed):
            out.append(name)
    return out


def tie_rank(name: str) -> int:
    """Which of several schedules that run the same order (M = 1, or one rank's file of the
    last stage) is read: 1F1B, the one every framework runs, first; ``naive``, the harness's
    own teaching schedule, last."""
    return {"1f1b": 0, "naive": 2}.get(name, 1)

#: How many audited steps detection tries, first to last, before it gives up: one step whose
#: order was misread (a span lost, an action split by a descheduled rank) or ran differently
#: (the first profiled step) does not hide the schedule of the others.
DETECT_STEPS = 3


def choose_schedule(tl: Timeline, declared, P, M, v, representatives, stage_pos, notes, steps):
    """The schedule to audit against: declared, else the manifest's, else detected from the
    order of the first of ``steps`` (at most :data:`DETECT_STEPS`) that matches a catalogue
    schedule. Returns (name, source, detected names, catalogue Schedule or None, twins): the
    ``twins`` are the split-backward schedules an un-annotated reading of the first stage alone
    cannot tell from the detected ones (:func:`empty_input_twins`)."""
    detected: list[str] = []
    twins: list[str] = []
    if all(0 <= p < P for p in stage_pos.values()):
        for k in steps[:DETECT_STEPS]:
            by_rank = tl.orders(k)
            orders = {p: by_rank.get(r, []) for p, r in enumerate(representatives)
                      if r is not None}
            detected = detect_on_positions(orders, stage_pos, P, M, v) if orders else []
            if detected:
                if any(rt.source == "inferred" for rt in tl.ranks):
                    twins = empty_input_twins(orders, stage_pos, P, M, v, detected)
                if k != steps[0]:
                    notes.append(f"schedule detected from step {k}'s order: the first audited "
                                 f"step's ({steps[0]}) differs from it")
                break
    manifest_name = (tl.manifest or {}).get("schedule")
    if declared:
        name, source = declared, "declared"
    elif manifest_name:
        name, source = str(manifest_name), "manifest"
    elif detected:
        detected = sorted(detected, key=tie_rank)  # stable: catalogue order otherwise
        name, source = detected[0], "detected"
        if len(detected) > 1:
            notes.append(f"at P={P}, M={M} the schedules {', '.join(detected)} run the same "
                         f"order: audited as {name} (same closed form, same replay)")
    else:
        notes.append("schedule not recognised from the action order: no closed-form theory")
        return None, "unknown", detected, None, []
    try:
        sched = build_schedule(name, P, M, chunks_for(name, v))
    except ScheduleError as exc:
        notes.append(f"schedule {name}: {exc}")
        sched = None
    return name, source, detected, sched, twins if source == "detected" else []


def closed_form_theory(name, sched, P, M, v, kind_means, notes):
    """Closed form with measured mean durations; a replay of the catalogue order where none applies."""
    split = kind_means["I"] > 0
    try:
        if split:
            th = theory(name, P, M, v, t_f=kind_means["F"] or 1.0, t_i=kind_means["I"],
                        t_w=kind_means["W"])
        else:
            th = theory(name, P, M, v, t_f=kind_means["F"] or 1.0, t_b=kind_means["B"] or 2.0)
    except ScheduleError as exc:
        notes.append(f"no theory for {name} with P={P}, M={M}, v={v}: {exc}")
        return None
    if th.bubble is None and sched is not None:
        means = {k: kind_means[k] or kind_means["F"] or 1.0 for k in kind_means}
        if not split:
            means["I"], means["W"] = means["B"] / 2, means["B"] / 2
        sim = replay(sched.orders, sched.placement, {(st, k): means[k]
                                                     for st in range(sched.num_stages) for k in means},
                     pairs=sched.pairs)
        notes.append(f"theory: {th.notes}")
        notes.append(f"theory: the closed form {th.formula} does not hold for the measured "
                     f"durations; the theory figure replays the catalogue {sched.name} order with "
                     "each kind's mean measured duration and free communication")
        th = replace(th, bubble=sim.bubble, formula=f"replay({sched.name}, mean T)")
    return th


def published_of(th) -> dict | None:
    """The published figure of the schedule's source at the measured durations (JSON form),
    None without theory or when the sources state none."""
    return th.published.to_dict("us") if th is not None and th.published is not None else None


def order_violations(tl: Timeline, sched, representatives, steps: list[int]) -> list[Finding]:
    """The first place each rank's order leaves the catalogue order at its position (first
    audited step)."""
    out = []
    whole_first_backward = {rt.rank for rt in tl.ranks if rt.source == "inferred"
                            and not rt.actions.filter((pl.col("stage") == 0)
                                                      & pl.col("kind").is_in(["I", "W"])).height}
    for k in steps[:1]:
        orders = tl.orders(k)
        for p, r in enumerate(representatives):
            if r is None:
                continue
            seen = orders.get(r, [])
            want = list(sched.orders[p]) if p < len(sched.orders) else []
            if r in whole_first_backward:  # read from the ops: the first stage's I is nothing
                want = list(first_stage_as_read(want))
            for pos, (a, b) in enumerate(zip(seen, want)):
                if a != b:
                    out.append(F.schedule_violation(sched.name, r, pos, str(a), str(b)))
                    break
    return out
