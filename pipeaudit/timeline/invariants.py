"""The structure every schedule has, checked on each reading of a run's actions.

A reading without annotations (:mod:`pipeaudit.timeline.infer`) guesses where actions begin
and end. Some guesses are wrong in a way the result can show: every schedule runs, per stage
and step, one backward (a B, or an I with its W) for each forward; every replica of a stage
runs the same number of them; every stage of a pipeline runs the same number of microbatches;
and the actions hold (nearly) all the compute of the thread that runs the schedule. A reading
that breaks any of these cannot be trusted for the schedule, M, theory or bubble, and the
audit says so (``READING_UNCERTAIN``) instead of reporting figures it cannot stand by.

Annotated readings are the trace's own word: a missing annotated action is a finding about the
run (``MISSING_ACTIONS``), not a doubt about the reading.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from pipeaudit.timeline.infer import RIVAL_FORWARDS
from pipeaudit.timeline.rank import RankTimeline

#: An inferred rank whose actions hold less of its pipeline thread's compute than this is
#: doubtful: a whole action (or a chunk) went unread.
COVERAGE_FLOOR = 0.99
#: Readings checked: those guessed from the ops.
CHECKED_SOURCES = ("inferred",)
#: Why every reading on a guessed layout is uncertain.
LAYOUT_GUESSED = ("its process groups carry no names, and neither they nor the transfers say "
                  "which ranks form a pipeline: the job is read as one pipeline of every rank "
                  "(--layout, e.g. pp=4,dp=2, settles it)")


@dataclass(frozen=True)
class Doubt:
    """Why one rank's reading cannot be trusted."""

    rank: int
    reason: str

    def to_dict(self) -> dict[str, object]:
        return {"rank": self.rank, "reason": self.reason}


def _counts(rt: RankTimeline) -> dict[tuple[int, int], dict[str, int]]:
    """(stage, step) -> actions per kind, over the rank's actions in a step."""
    a = rt.actions
    out: dict[tuple[int, int], dict[str, int]] = defaultdict(lambda: dict.fromkeys("FBIW", 0))
    if a.height == 0:
        return out
    stage = a["stage"].to_numpy()
    step = a["step"].to_numpy()
    kind = a["kind"].to_numpy()
    ok = step >= 0
    for s, k, kd in zip(stage[ok].tolist(), step[ok].tolist(), kind[ok].tolist()):
        out[(s, k)][kd] += 1
    return out


def _kind_doubt(counts: Mapping[tuple[int, int], dict[str, int]]) -> str | None:
    """F and B/I/W counts that no schedule runs."""
    for (stage, step), c in sorted(counts.items()):
        backward = c["B"] + c["I"]
        if c["F"] != backward:
            return (f"stage {stage} step {step} reads {c['F']} forwards but {backward} backwards "
                    "(every schedule runs one backward per forward)")
        if c["W"] and c["W"] != c["I"]:
            return (f"stage {stage} step {step} reads {c['I']} input-gradient and {c['W']} "
                    "weight-gradient actions (every I has its W)")
    return None


#: Sends past a pipeline end (gradients back from the first position, activations on from the
#: last), as a share of the rank's actions of that kind, from which the rank holds another stage
#: too (a transfer's kind is read from the action before it: a few may be misread, another
#: stage's every transfer is not).
LOOP_SEND_SHARE = 0.25


def sends_from_position(ranks: Sequence[RankTimeline], positions: Mapping[int, int],
                        position: int, kind: str) -> dict[int, int]:
    """Guessed rank at stage ``position`` -> how many transfers it sent after a ``kind`` action
    (read before the transfers are settled, from the action each send follows): gradients
    (``"B"``) from the first position, activations (``"F"``) from the last."""
    out = {}
    for rt in ranks:
        if rt.source in CHECKED_SOURCES and positions.get(rt.rank) == position and rt.p2p_tags.height:
            tags = rt.p2p_tags
            out[rt.rank] = int(((tags["dir"] == "send") & (tags["kind"] == kind)).sum())
    return out


def sending_past_the_end(ranks: Sequence[RankTimeline], sent: Mapping[int, int],
                         kinds: Sequence[str]) -> set[int]:
    """The ranks of a pipeline end whose sends past it (``sent``, :func:`sends_from_position`)
    are a :data:`LOOP_SEND_SHARE` of their actions of ``kinds`` or more. The first stage has no
    stage before it and the last none after it, so such a rank holds another stage too (a
    looped, interleaved or V-shaped schedule)."""
    out = set()
    for rt in ranks:
        actions = int(rt.actions["kind"].is_in(list(kinds)).sum()) if rt.rank in sent else 0
        if actions and sent[rt.rank] >= LOOP_SEND_SHARE * actions:
            out.add(rt.rank)
    return out


def hands_on(stage: np.ndarray, kind: np.ndarray, held: np.ndarray, last: int) -> np.ndarray:
    """Which of the actions (``stage``, ``kind``) of a rank holding the stages ``held`` (of
    stages 0..``last``) hand a tensor to another rank: a forward its output to the next stage,
    a B or I its input's gradient to the previous one, where that stage is not held."""
    return (((kind == "F") & (stage < last) & ~np.isin(stage + 1, held))
            | (np.isin(kind, ["B", "I"]) & (stage > 0) & ~np.isin(stage - 1, held)))


def handed_on(stage: np.ndarray, kind: np.ndarray, held: np.ndarray, last: int) -> int:
    """How many of the actions hand a tensor to another rank (:func:`hands_on`)."""
    return int(hands_on(stage, kind, held, last).sum())


def sends_short(rt: RankTimeline, sent: int, num_positions: int) -> str | None:
    """Why the reading of ``rt`` asks for more sends than the rank made (``sent`` in all), or
    None. Every forward hands its output to the next stage and every B or I its input's
    gradient to the previous one; where that stage is on another rank it is a send. A stage of
    alike layers read as several forwards, with I and W read as two backwards, asks for sends
    the trace does not have (its order and counts fit a schedule of twice the chunks)."""
    acts = rt.actions.filter(pl.col("step") >= 0)
    steps = acts["step"].n_unique()
    if not steps or num_positions < 2:
        return None
    stage = acts["stage"].to_numpy()
    held = np.unique(stage)
    need = handed_on(stage, acts["kind"].to_numpy(), held, num_positions * held.size - 1)
    if sent >= need:
        return None
    return (f"it reads {need / steps:g} actions a step that hand a tensor to another rank, but "
            f"it sent {sent / steps:g} a step: some forwards or backwards are read as several "
            "(alike layers)")


def reading_doubts(ranks: Sequence[RankTimeline], positions: Mapping[int, int], *,
                   replicas: Sequence[Sequence[Sequence[int]]] = (), fed_first: set[int] = frozenset(),
                   feeding_last: set[int] = frozenset(),
                   chunks_ambiguous: bool = False, repeats_undecided: set[int] = frozenset(),
                   stated: tuple[int | None, int | None] | None = None,
                   steps_undecided: str = "", layout_guessed: bool = False,
                   sent: Mapping[int, int] | None = None, num_positions: int = 0,
                   coverage_floor: float = COVERAGE_FLOOR) -> list[Doubt]:
    """The doubts about the guessed readings of ``ranks`` (one per rank at most, first reason
    found), and about every reading on a guessed layout. ``positions``: rank -> stage
    position; ``replicas``: the layout's pipelines, each a list of positions, each a tuple of
    tensor-parallel peers; ``fed_first``: ranks of the first
    position that send gradients back, ``feeding_last``: ranks of the last position that send
    activations on (:func:`sending_past_the_end`);
    ``chunks_ambiguous``: the order of the actions fits several chunk counts
    (:mod:`pipeaudit.timeline.virtual`);
    ``repeats_undecided``: ranks whose backward blocks of one op sequence repeated read as
    several backwards or as one, with no other rank and no stated M to say which
    (:func:`pipeaudit.timeline.build.consistent_counts`); ``stated``: (M, steps) the user
    stated (the steps where those of the ranks without step marks rest on them): a reading that
    runs other than M forwards per stage and step, or other than that many steps, contradicts
    them;
    ``steps_undecided``: why the steps of the ranks without step marks are a guess that
    nothing settles ("" where they are not); ``layout_guessed``: the process groups show a
    grid that neither their names nor the transfers place (:attr:`Layout.guessed`);
    ``sent``: rank -> the sends it made (where its transfers are read), of ``num_positions``
    (:func:`sends_short`)."""
    checked = [rt for rt in ranks if rt.source in CHECKED_SOURCES and rt.actions.height]
    # a guessed grid doubts every reading, spans or not: P and each step's window rest on it
    doubts: dict[int, str] = {rt.rank: LAYOUT_GUESSED for rt in ranks if layout_guessed
                              and rt.actions.height and rt.source not in CHECKED_SOURCES}
    if not checked:
        return [Doubt(r, why) for r, why in sorted(doubts.items())]
    counts = {rt.rank: _counts(rt) for rt in checked}
    for rt in checked:
        why = _kind_doubt(counts[rt.rank])
        if why is None and rt.coverage is not None and rt.coverage < coverage_floor:
            why = (f"only {rt.coverage:.1%} of its schedule thread's compute lies in an action or "
                   f"in a step's start-up or wrap-up (below {coverage_floor:.0%}): some work was "
                   "read as no action")
        if why is None and rt.rank in fed_first and rt.actions["stage"].n_unique() == 1:
            why = ("it runs the first stage yet sends gradients back, so it holds a later stage "
                   "too, but the reading gives it one stage")
        if why is None and rt.rank in feeding_last and rt.actions["stage"].n_unique() == 1:
            why = ("it runs the last stage yet sends activations on, so it holds an earlier "
                   "stage too, but the reading gives it one stage")
        if why is None and sent and rt.rank in sent:
            why = sends_short(rt, sent[rt.rank], num_positions)
        if why is None and rt.inferred_doubt:
            why = rt.inferred_doubt
        if why is None and rt.rank in repeats_undecided:
            why = ("each of its backward blocks is one op sequence repeated: that many "
                   "backwards, or one backward of alike layers; no other rank's trace and no "
                   "stated M tells which")
        if why is None and stated is not None:
            why = _stated_doubt(counts[rt.rank], stated[0],
                                stated[1] if rt.step_evidence is None else None)
        if why is None and layout_guessed:
            why = LAYOUT_GUESSED
        if why is None and steps_undecided and rt.step_evidence is None:
            why = steps_undecided
        if why is None and chunks_ambiguous:
            why = ("its order of forwards and backwards fits several numbers of chunks per rank "
                   "(v) and microbatches (M): the reading cannot tell which ran")
        if why is not None:
            doubts[rt.rank] = why
    # the same stage position in every replica (and every tensor-parallel peer) runs as many
    # forwards per step
    forwards = {r: _forwards_per_step(c) for r, c in counts.items()}
    by_position: dict[int, dict[int, tuple]] = defaultdict(dict)
    for r, f in forwards.items():
        if r in positions:
            by_position[positions[r]][r] = f
    for pos, per_rank in sorted(by_position.items()):
        if len(set(per_rank.values())) > 1:
            for r, f in sorted(per_rank.items()):
                doubts.setdefault(r, f"its forwards per step {list(f)} differ from those of the "
                                     f"other ranks at stage position {pos}")
    # one M: every stage of a pipeline runs the same microbatches, every step
    for pipeline in replicas or [tuple((r,) for r in sorted(positions))]:
        members = [r for peers in pipeline for r in peers if r in counts]
        per_rank = {r: sorted({c["F"] for c in counts[r].values()}) for r in members}
        seen = [m for ms in per_rank.values() for m in ms]
        if len(set(seen)) > 1:
            common = max(set(seen), key=seen.count)
            for r, ms in sorted(per_rank.items()):
                if ms != [common]:
                    doubts.setdefault(r, f"its stages run {ms} forwards per step where the other "
                                         f"ranks run {common}: no M fits every stage")
    return [Doubt(r, why) for r, why in sorted(doubts.items())]


def _stated_doubt(counts: Mapping[tuple[int, int], dict[str, int]], microbatches: int | None,
                  steps: int | None) -> str | None:
    """The reading against the M and steps the user stated (None: it agrees)."""
    read_steps = len({step for _, step in counts})
    if steps is not None and read_steps != steps:
        return (f"it reads {read_steps} steps where {steps} were stated: its forwards and "
                "backwards do not divide into the stated steps by any schedule's order")
    forwards = sorted({c["F"] for c in counts.values()})
    if microbatches is not None and forwards != [microbatches]:
        return (f"its stages read {forwards} forwards per step where M = {microbatches} was "
                "stated: its chunks or steps are not what the order says")
    return None


def _forwards_per_step(counts: Mapping[tuple[int, int], dict[str, int]]) -> tuple[int, ...]:
    per_step: dict[int, int] = defaultdict(int)
    for (_, step), c in counts.items():
        per_step[step] += c["F"]
    return tuple(per_step[k] for k in sorted(per_step))


def layout_only(reasons: Sequence[str]) -> bool:
    """Whether every doubt is the guessed layout's (annotated readings too): ``--layout``,
    not the schedule or the action spans, settles them."""
    return bool(reasons) and all(r == LAYOUT_GUESSED for r in reasons)


def doubt_message(doubts: Sequence[Doubt]) -> str:
    """One sentence naming the ranks and reasons, and how to settle the reading."""
    first = doubts[0]
    others = [d.rank for d in doubts[1:]]
    also = f" (also ranks {others})" if others else ""
    if layout_only([d.reason for d in doubts]):
        return (f"The job's layout is a guess: rank {first.rank}: {first.reason}{also}. The "
                "schedule, M, theory and bubble are not given as facts until --layout states "
                "the grid.")
    if all(d.reason.startswith(RIVAL_FORWARDS) for d in doubts):
        settle = ("Name the action spans with --action-pattern REGEX (a stated schedule and M "
                  "fit both readings alike).")
    else:
        settle = ("State what ran with --run-schedule NAME and --run-microbatches M (a schedule "
                  "whose order fits the actions read settles it), or name the action spans with "
                  "--action-pattern REGEX.")
    return (f"The actions read from the ops do not settle what ran: rank "
            f"{first.rank}: {first.reason}{also}. The schedule, M, theory and bubble are not "
            f"given as facts. {settle}")
