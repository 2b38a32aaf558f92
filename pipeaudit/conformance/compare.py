"""Hold the un-annotated reading of a run to its annotated twin and to the run's truth.

A cell passes when, read without annotations: schedule, P, v, M, steps and layout equal the
truth; no ``MISSING_ACTIONS``, ``DUPLICATED_ACTIONS`` or ``SCHEDULE_ORDER_VIOLATION``; each
rank's bubble is within :data:`BUBBLE_TOL` of the twin's; each (rank, stage, kind)'s median
per-action compute difference within :data:`COMPUTE_TOL` of the twin's median; where the truth
says so (:attr:`Truth.other_ops_allowed`), only the actions it allows hold other ops than the
twin's.

Both readings read the same events, so an action given the same ops has the same compute to
the nanosecond: :attr:`Verdict.other_ops` counts the actions that were not (a reading's
boundary that disagrees with the twin's, found on every run, not only on the one where the
host was descheduled in the op it moves).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import median
from typing import Any

import polars as pl

from pipeaudit.audit.result import AuditResult

BUBBLE_TOL = 0.005
COMPUTE_TOL = 0.05
#: Compute equal within this (µs) is the same ops (the trace's timestamps have ns digits).
SAME_OPS_US = 0.01
#: Where a reading may give actions other ops than its twin (:attr:`Truth.other_ops_allowed`).
NOWHERE, LAST_STAGE, FORWARDS = "nowhere", "the last stage", "forwards"
#: Findings that say the reading got the actions wrong.
READING_ERRORS = ("MISSING_ACTIONS", "DUPLICATED_ACTIONS", "SCHEDULE_ORDER_VIOLATION")


@dataclass(frozen=True)
class Truth:
    """What the run was: from its configuration, never from a reading."""

    schedule: str
    P: int
    v: int
    M: int
    steps: int
    dp: int
    #: the ranks read (all of the job's, or one)
    ranks: tuple[int, ...]
    #: the pipeline positions read (None: every one)
    positions: tuple[int, ...] | None = None
    #: which actions may hold other ops than the twin's: :data:`NOWHERE`, :data:`LAST_STAGE`,
    #: :data:`FORWARDS` (the known differences of a framework's reading), None: not checked
    other_ops_allowed: str | None = None
    #: the reading may say it cannot tell (``READING_UNCERTAIN``) instead of the shape
    may_be_uncertain: bool = False


@dataclass
class Verdict:
    """One cell's comparison: the problems found (empty: it passes) and the margins."""

    problems: list[str] = field(default_factory=list)
    max_bubble_diff: float | None = None
    max_compute_diff: float | None = None  #: relative, over (rank, stage, kind)
    coverage: float | None = None
    #: (actions whose compute differs from the twin's, actions in both readings)
    other_ops: tuple[int, int] | None = None
    #: the reading said it cannot tell (``READING_UNCERTAIN``)
    uncertain: bool = False
    #: what the allowed other ops add to the bubble's tolerance (:func:`_allowed_slack`)
    allowed_slack: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "problems": self.problems, "max_bubble_diff": self.max_bubble_diff,
                "max_compute_diff": self.max_compute_diff, "coverage": self.coverage,
                "other_ops": list(self.other_ops) if self.other_ops is not None else None,
                "uncertain": self.uncertain}


def compare(truth: Truth, twin: AuditResult, twin_actions: pl.DataFrame,
            bare: AuditResult, bare_actions: pl.DataFrame) -> Verdict:
    """The verdict on ``bare`` (read without annotations) against ``twin`` and ``truth``."""
    v = Verdict(coverage=bare.inference_coverage)
    if bare.uncertain:
        return _uncertain(truth, bare, v)
    _check_shape(truth, bare, v.problems)
    for f in bare.findings:
        if f.code in READING_ERRORS:
            where = f" rank {f.rank}" if f.rank is not None else ""
            v.problems.append(f"{f.code}{where}: {f.message}")
    differ, total = other_ops(twin_actions, bare_actions)
    v.other_ops = (differ.height, total)
    # the framework's known other ops (a few µs an action) are allowed: where the host was
    # descheduled in one of them it lends the action milliseconds, and the bubble may move by
    # as much as that time over the step window, but by no more
    slack = (_allowed_slack(differ, truth, twin, bare)
             if truth.other_ops_allowed not in (None, NOWHERE) else 0.0)
    truth_bubble = {r.rank: r.bubble for r in twin.ranks}
    diffs = []
    for r in bare.ranks:
        want = truth_bubble.get(r.rank)
        if want is None or r.bubble is None:
            v.problems.append(f"rank {r.rank}: no bubble to compare (twin {want}, bare {r.bubble})")
            continue
        d = abs(r.bubble - want)
        diffs.append(d)
        if d > BUBBLE_TOL + slack:
            v.problems.append(f"rank {r.rank}: bubble {r.bubble:.4f}, twin {want:.4f} "
                              f"({d:+.4f} off)")
    v.max_bubble_diff = max(diffs) if diffs else None
    v.allowed_slack = slack
    rel = _compute_diffs(twin_actions, bare_actions, v.problems)
    v.max_compute_diff = max(rel) if rel else None
    if truth.other_ops_allowed is not None:
        stray = _not_allowed(differ, truth.other_ops_allowed, truth.P * truth.v - 1)
        if stray.height:
            first = stray.sort("rank", "step", "stage", "microbatch").row(0, named=True)
            where = "" if truth.other_ops_allowed == NOWHERE else f" outside {truth.other_ops_allowed}"
            v.problems.append(
                f"{stray.height} of {total} actions{where} hold other ops than the twin's "
                f"(first: rank {first['rank']} step {first['step']} stage {first['stage']} "
                f"{first['kind']}{first['microbatch']})")
    return v


def _uncertain(truth: Truth, bare: AuditResult, v: Verdict) -> Verdict:
    """A reading that says it cannot tell passes where the cell allows it, claims no schedule
    or M, and reports no error about the run's actions."""
    v.uncertain = True
    if not truth.may_be_uncertain:
        first = bare.uncertain[0]
        v.problems.append(f"reading uncertain: rank {first['rank']}: {first['reason']}")
    if bare.schedule is not None or bare.num_microbatches is not None:
        v.problems.append(f"uncertain, yet claims schedule {bare.schedule!r} and M "
                          f"{bare.num_microbatches!r}")
    if not any(f.code == "READING_UNCERTAIN" for f in bare.findings):
        v.problems.append("uncertain without a READING_UNCERTAIN finding")
    v.problems += [f"{f.code}: {f.message}" for f in bare.findings if f.code in READING_ERRORS]
    return v


def _allowed_slack(differ: pl.DataFrame, truth: Truth, twin: AuditResult,
                   bare: AuditResult) -> float:
    """How far the allowed other ops can move a bubble: per step that holds any, their whole
    compute difference (every rank's) and the step window's change (an action that holds a
    step's start-up op opens the window earlier) over the twin's window, averaged over the
    steps."""
    allowed = differ.join(_not_allowed(differ, truth.other_ops_allowed or NOWHERE,
                                       truth.P * truth.v - 1), on=differ.columns, how="anti")
    windows = {s.step: s.step_time_us for s in twin.steps if s.step_time_us}
    if allowed.height == 0 or not windows:
        return 0.0
    bare_windows = {s.step: s.step_time_us for s in bare.steps}
    per_step = (allowed.with_columns(d=(pl.col("compute_us_bare") - pl.col("compute_us")).abs())
                .group_by("step").agg(pl.col("d").sum()))
    parts = [(d + abs(bare_windows.get(k, windows[k]) - windows[k])) / windows[k]
             for k, d in zip(per_step["step"].to_list(), per_step["d"].to_list()) if k in windows]
    return sum(parts) / len(windows) if parts else 0.0


def other_ops(twin: pl.DataFrame, bare: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """(the actions of both readings whose compute differs by more than :data:`SAME_OPS_US`,
    how many actions both readings have), matched by rank, step, stage, kind and microbatch."""
    key = ["rank", "step", "stage", "kind", "microbatch"]
    both = twin.select(*key, "compute_us").join(bare.select(*key, "compute_us"), on=key,
                                                suffix="_bare")
    differ = both.filter((pl.col("compute_us_bare") - pl.col("compute_us")).abs() > SAME_OPS_US)
    return differ, both.height


def _not_allowed(differ: pl.DataFrame, allowed: str, last_stage: int) -> pl.DataFrame:
    if allowed == LAST_STAGE:
        return differ.filter(pl.col("stage") != last_stage)
    if allowed == FORWARDS:
        return differ.filter(pl.col("kind") != "F")
    return differ


def _check_shape(truth: Truth, bare: AuditResult, problems: list[str]) -> None:
    seen = {"schedule": bare.schedule, "P": bare.num_ranks, "v": bare.num_chunks,
            "M": bare.num_microbatches, "steps": bare.num_steps}
    want = {"schedule": truth.schedule, "P": truth.P, "v": truth.v, "M": truth.M,
            "steps": truth.steps}
    for key, value in want.items():
        if seen[key] != value and not (key == "schedule" and same_order(seen[key], truth)):
            problems.append(f"{key} read as {seen[key]!r}, is {value!r}")
    layout = bare.layout or {}
    if len(truth.ranks) > 1 and (layout.get("pp"), layout.get("dp")) != (truth.P, truth.dp):
        problems.append(f"layout read as pp={layout.get('pp')}, dp={layout.get('dp')}; "
                        f"is pp={truth.P}, dp={truth.dp}")
    present = tuple(sorted(bare.ranks_present or [r.rank for r in bare.ranks]))
    if present != truth.ranks:
        problems.append(f"ranks read {list(present)}, given {list(truth.ranks)}")


def same_order(name: str | None, truth: Truth) -> bool:
    """Whether schedule ``name`` runs exactly the truth's order at its P, M and v, at the
    positions read (at M = 1 naive, GPipe and 1F1B are one schedule, and 1F1B's last stage
    runs naive's order: no reading can tell them apart)."""
    from pipeaudit.errors import ScheduleError
    from pipeaudit.schedules import build_schedule

    if name is None:
        return False
    try:
        a = build_schedule(name, truth.P, truth.M, truth.v if truth.v > 1 else None)
        b = build_schedule(truth.schedule, truth.P, truth.M, truth.v if truth.v > 1 else None)
    except ScheduleError:
        return False
    positions = truth.positions if truth.positions is not None else range(truth.P)
    return a.placement == b.placement and all(a.orders[p] == b.orders[p] for p in positions)


def _compute_diffs(twin: pl.DataFrame, bare: pl.DataFrame, problems: list[str]) -> list[float]:
    """Per (rank, stage, kind): the median of the per-action compute differences (bare less
    twin, actions matched by step and microbatch) relative to the twin's median compute. A
    host descheduled in an op that one reading gives an action moves that one action, never
    the median of the differences; every action missing a layer moves it (where no action
    matches, the difference of the two medians)."""
    def by_key(actions: pl.DataFrame) -> dict[tuple, dict[tuple, float]]:
        out: dict[tuple, dict[tuple, float]] = {}
        for rank, stage, kind, step, mb, us in actions.select(
                "rank", "stage", "kind", "step", "microbatch", "compute_us").iter_rows():
            out.setdefault((rank, stage, kind), {})[(step, mb)] = us
        return out

    want, seen = by_key(twin), by_key(bare)
    rel = []
    for key in sorted(set(want) | set(seen)):
        if key not in want or key not in seen:
            problems.append("rank {} stage {} {}: actions only in the {} reading".format(
                *key, "bare" if key in seen else "annotated"))
            continue
        base = median(want[key].values())
        paired = [seen[key][a] - want[key][a] for a in want[key] if a in seen[key]]
        diff = median(paired) if paired else median(seen[key].values()) - base
        d = abs(diff) / base if base > 0 else 0.0
        rel.append(d)
        if d > COMPUTE_TOL:
            problems.append("rank {} stage {} {}: median compute difference {:+.0f} us, twin's "
                            "median {:.0f} us ({:+.1%})".format(*key, diff, base, diff / base))
    return rel
