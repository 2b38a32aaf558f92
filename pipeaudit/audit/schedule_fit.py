"""Which schedule a run ran, its closed-form theory, and where its order leaves the catalogue."""

from __future__ import annotations

from dataclasses import replace

from pipeaudit.audit import findings as F
from pipeaudit.audit.result import Finding
from pipeaudit.errors import ScheduleError
from pipeaudit.schedules import build_schedule, detect_schedule, replay, theory
from pipeaudit.timeline.model import Timeline


def choose_schedule(tl, declared, P, M, v, pranks, placement, notes):
    """The schedule to audit against: declared, else the manifest's, else detected from
    the first step's order. Returns (name, source, detected names, catalogue Schedule or None)."""
    rank_index = {r: i for i, r in enumerate(pranks)}
    detected: list[str] = []
    if sorted(placement) == list(range(len(placement))):
        step0 = tl.orders(tl.steps[0])
        orders = [step0.get(r, []) for r in pranks]
        place = [rank_index[placement[s]] for s in range(len(placement))]
        try:
            detected = detect_schedule(orders, place, M)
        except ScheduleError:
            detected = []
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


def order_violations(tl: Timeline, sched, pranks: list[int], steps: list[int]) -> list[Finding]:
    """The first place each rank's order leaves the catalogue order (first audited step)."""
    out = []
    for k in steps[:1]:
        orders = tl.orders(k)
        for i, r in enumerate(pranks):
            seen = orders.get(r, [])
            want = list(sched.orders[i]) if i < len(sched.orders) else []
            for pos, (a, b) in enumerate(zip(seen, want)):
                if a != b:
                    out.append(F.schedule_violation(sched.name, r, pos, str(a), str(b)))
                    break
    return out
