"""Which schedule a run ran, its closed-form theory, and where its order leaves the catalogue.

Ranks are read by stage position (``representatives[p]``: the rank read at position p, None
where its trace is missing), so that one rank's file is compared with its own position's
order in the schedule, not with the first rank's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from pipeaudit.audit import findings as F
from pipeaudit.audit.result import Finding
from pipeaudit.errors import ScheduleError
from pipeaudit.schedules import SCHEDULE_NAMES, build_schedule, replay, theory
from pipeaudit.schedules.catalogue import build_uncached
from pipeaudit.timeline.model import Timeline


@dataclass(frozen=True)
class _Signature:
    """What detection compares of a catalogue schedule: its placement and a hash of each
    rank's order. A 64-stage schedule of 64 microbatches holds 8,000-25,000 actions; a
    1,024-rank job's detection kept every candidate's (about 11 MB) for the rest of the
    audit, where these take a few KB."""

    placement: tuple[int, ...]
    order_hashes: tuple[int, ...]


@lru_cache(maxsize=256)
def _signature(name: str, P: int, M: int, v: int) -> _Signature | None:
    """The :class:`_Signature` of catalogue schedule ``name`` (None where it cannot run),
    built without keeping the schedule (:func:`pipeaudit.schedules.catalogue.build_uncached`)."""
    try:
        sched = build_uncached(name, P, M, v if v > 1 else None)
    except ScheduleError:
        return None
    return _Signature(sched.placement, tuple(hash(o) for o in sched.orders))


def detect_on_positions(orders: dict[int, list], stage_pos: dict[int, int], P: int, M: int,
                        v: int) -> list[str]:
    """Catalogue schedules whose placement and per-position orders equal the observed ones at
    every position present (``orders``: position -> its actions in execution order). Each
    candidate is screened by its :class:`_Signature`; one that passes is compared in full."""
    if not orders or P < 1:
        return []
    found = []
    observed = {p: tuple(o) for p, o in orders.items()}
    hashes = {p: hash(o) for p, o in observed.items()}  # equal orders hash equal
    for name in SCHEDULE_NAMES:
        sig = _signature(name, P, M, v)
        if sig is None or not _fits(sig.placement, sig.order_hashes, stage_pos, hashes):
            continue
        sched = build_schedule(name, P, M, v if v > 1 else None)
        if _fits(sched.placement, sched.orders, stage_pos, observed):
            found.append(name)
    return found


def _fits(placement: tuple[int, ...], per_rank: tuple, stage_pos: dict[int, int],
          observed: dict[int, object]) -> bool:
    """Whether every observed stage sits at its schedule position and every observed
    position's order (or its hash) equals the schedule's."""
    if any(s >= len(placement) or placement[s] != p for s, p in stage_pos.items()):
        return False
    return all(o == per_rank[p] for p, o in observed.items() if p < len(per_rank))


def choose_schedule(tl: Timeline, declared, P, M, v, representatives, stage_pos, notes, step):
    """The schedule to audit against: declared, else the manifest's, else detected from
    ``step``'s order. Returns (name, source, detected names, catalogue Schedule or None)."""
    detected: list[str] = []
    by_rank = tl.orders(step)
    orders = {p: by_rank.get(r, []) for p, r in enumerate(representatives) if r is not None}
    if orders and all(0 <= p < P for p in stage_pos.values()):
        detected = detect_on_positions(orders, stage_pos, P, M, v)
    manifest_name = (tl.manifest or {}).get("schedule")
    if declared:
        name, source = declared, "declared"
    elif manifest_name:
        name, source = str(manifest_name), "manifest"
    elif detected:
        name, source = detected[0], "detected"
    else:
        notes.append("schedule not recognised from the action order: no closed-form theory")
        return None, "unknown", detected, None
    try:
        sched = build_schedule(name, P, M, v if v > 1 else None)
    except ScheduleError as exc:
        notes.append(f"schedule {name}: {exc}")
        sched = None
    return name, source, detected, sched


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
    for k in steps[:1]:
        orders = tl.orders(k)
        for p, r in enumerate(representatives):
            if r is None:
                continue
            seen = orders.get(r, [])
            want = list(sched.orders[p]) if p < len(sched.orders) else []
            for pos, (a, b) in enumerate(zip(seen, want)):
                if a != b:
                    out.append(F.schedule_violation(sched.name, r, pos, str(a), str(b)))
                    break
    return out
