"""Backward actions made of several autograd-engine calls (split backwards read from the ops).

A schedule that splits the backward (zero-bubble, V-shaped, DualPipeV) runs it as two actions
per microbatch: I, the input's gradient, and W, the weights'. torch runs W as one engine call
per group of parameters, with the engine's bookkeeping between the calls: views of the
gradients before a call (``aten::view_as``), in-place accumulation into ``.grad`` after it
(``aten::add_``). None of these ops computes a layer: they are *glue*. A run of engine calls
with nothing but glue between them is one or more backward actions back to back (a rank of
two stages may run one stage's W right after the other's).

How many actions a run holds is read from the runs themselves: every action of a kind runs the
same calls for every microbatch, so a run that is the concatenation of shorter runs seen alone
(between transfers or forwards) is those actions, and a run that is no such concatenation is
one action. Glue between two actions goes to the earlier one when it updates in place (it
accumulates what that call computed) and to the later one otherwise (views and buffers that
its call reads); glue right before a run's first call (the loss's gradient seed, views) and
in-place glue right after its last are the run's, and so is the detach that hands an input
gradient to another stage of the rank (which ends the run). On GPU torch accumulates with an out-of-place
``aten::add``, glue only between two calls.
"""

from __future__ import annotations

import numpy as np
import polars as pl

#: Ops that compute no layer and prepare or take in an engine call's tensors: views, aliases
#: and fresh tensors (``ones_like`` seeds a loss's gradient). Not ``detach``: a forward's
#: output is detached to be sent, or handed to a stage of the same rank.
PREP_GLUE_RE = (r"^aten::(view|view_as|_unsafe_view|reshape|_reshape_alias|alias|expand|"
                r"expand_as|as_strided|t|transpose|ones_like|zeros_like|empty_like|full_like|"
                r"empty|empty_strided|zeros|ones|fill_|zero_)$")
#: In-place updates that take in a call's result (accumulating a gradient into ``.grad``);
#: gradient *scaling* (``div_``, ``mul_``) is no call's and ends a run.
IN_PLACE_GLUE_RE = r"^aten::(add_|copy_|_foreach_add_|_foreach_copy_)$"
#: An out-of-place sum between two engine calls: a gradient accumulated as ``grad = grad + g``
#: (torch's split W on GPU). A forward may begin with one, so it never extends a run's end.
ACCUMULATE_GLUE_RE = r"^aten::add$"
#: The in-place detach of an input gradient handed to a stage of the same rank (the turn of a
#: V placement: a detach before a send is the transfer's). It ends the action it follows, and
#: so ends a run: the next action's calls are another stage's.
HANDOFF_GLUE_RE = r"^aten::detach_$"
#: Runs of more calls than this, or more distinct runs than this, are not decomposed.
MAX_RUN_CALLS = 512
MAX_WORDS = 128
#: Blocks of more backward ops than this are not decomposed into calls.
MAX_BLOCK_OPS = 2000

NO_GLUE, PREP, IN_PLACE, ACCUMULATE, HANDOFF = 0, 1, 2, 3, 4


def glue_classes(names: pl.Series) -> np.ndarray:
    """Each op's glue class by its name (:data:`PREP`, :data:`IN_PLACE`, :data:`ACCUMULATE`,
    :data:`HANDOFF`, else :data:`NO_GLUE`)."""
    classes = [(PREP_GLUE_RE, PREP), (IN_PLACE_GLUE_RE, IN_PLACE),
               (ACCUMULATE_GLUE_RE, ACCUMULATE), (HANDOFF_GLUE_RE, HANDOFF)]
    return np.select([names.str.contains(rx).fill_null(False).to_numpy() for rx, _ in classes],
                     [c for _, c in classes], NO_GLUE).astype(np.int8)


def runs_of_calls(calls: list[tuple[int, int]], glue: np.ndarray,
                  step_ids: np.ndarray | None) -> list[list[tuple[int, int]]]:
    """Consecutive engine calls (backward blocks, by index) grouped into runs: two calls are in
    one run when every op between them is glue and a step does not begin between them."""
    runs: list[list[tuple[int, int]]] = []
    for a, b in calls:
        if runs:
            _, prev_end = runs[-1][-1]
            between = glue[prev_end + 1:a]
            same_step = step_ids is None or step_ids[prev_end] == step_ids[a]
            if same_step and bool(((between != NO_GLUE) & (between != HANDOFF)).all()):
                runs[-1].append((a, b))
                continue
        runs.append([(a, b)])
    return runs


def split_runs(runs: list[list[tuple[int, int]]], codes: np.ndarray) -> list[list[list[tuple[int, int]]]]:
    """Each run as its actions, each action a list of calls (see the module docstring)."""
    sig: dict[tuple, int] = {}
    words = [tuple(sig.setdefault(tuple(codes[a:b + 1].tolist()), len(sig)) for a, b in run)
             for run in runs]
    cuts = concatenations(words, MAX_RUN_CALLS)
    return [[run[i:j] for i, j in _pieces(cuts[w], len(run))] for run, w in zip(runs, words)]


def split_calls(calls: list[tuple[int, int]], codes: np.ndarray) -> list[tuple[int, int]]:
    """Engine calls with nothing between them read as one block of backward ops: a block that
    is the concatenation of blocks seen alone (the same op sequences) is those calls (two Ws of
    a first stage, whose Is run no op; a W and the next I with no transfer between)."""
    seqs = [tuple(codes[a:b + 1].tolist()) for a, b in calls]
    cuts = concatenations(seqs, MAX_BLOCK_OPS)
    return [(a + i, a + j - 1) for (a, _), w in zip(calls, seqs) for i, j in _pieces(cuts[w], len(w))]


def concatenations(words: list[tuple[int, ...]], longest: int) -> dict[tuple[int, ...], list[int]]:
    """Each distinct word's cut points into the fewest (two or more) shorter words of the list
    that are no such concatenation themselves ([] for a word that is none, or longer than
    ``longest``)."""
    dictionary: list[tuple[int, ...]] = []
    cuts: dict[tuple[int, ...], list[int]] = {}
    for w in sorted(set(words), key=lambda w: (len(w), w)):
        cut = _decompose(w, dictionary) if len(w) <= longest else None
        cuts[w] = cut or []
        if cut is None and len(dictionary) < MAX_WORDS:
            dictionary.append(w)
    return cuts


def _pieces(cuts: list[int], n: int) -> list[tuple[int, int]]:
    """(start, stop) of the pieces that ``cuts`` make of ``n`` items."""
    bounds = [0] + cuts + [n]
    return list(zip(bounds[:-1], bounds[1:]))


def _decompose(w: tuple[int, ...], dictionary: list[tuple[int, ...]]) -> list[int] | None:
    """Cut points splitting ``w`` into the fewest (at least two) dictionary words, or None."""
    n = len(w)
    if n < 2 or not dictionary:
        return None
    by_first: dict[int, list[tuple[int, ...]]] = {}
    for d in dictionary:
        if len(d) < n:
            by_first.setdefault(d[0], []).append(d)
    best: list[tuple[int, int] | None] = [None] * (n + 1)  # (words, previous cut)
    best[0] = (0, -1)
    for i in range(n):
        if best[i] is None:
            continue
        for d in by_first.get(w[i], ()):
            j = i + len(d)
            if j <= n and w[i:j] == d and (best[j] is None or best[i][0] + 1 < best[j][0]):
                best[j] = (best[i][0] + 1, i)
    if best[n] is None or best[n][0] < 2:
        return None
    cuts, j = [], n
    while j > 0:
        j = best[j][1]
        if j > 0:
            cuts.append(j)
    return sorted(cuts)


def backward_actions(calls: list[tuple[int, int]], glue: np.ndarray, codes: np.ndarray,
                     step_ids: np.ndarray | None) -> list[tuple[int, int]]:
    """The backward actions (first op, last op) that the engine calls ``calls`` make, glue
    included (see the module docstring). ``glue``: each op's glue class (:data:`PREP`,
    :data:`IN_PLACE`; :data:`NO_GLUE` for every op that is not compute)."""
    out = []
    n = glue.size
    for actions in split_runs(runs_of_calls(calls, glue, step_ids), codes):
        spans = [[calls_[0][0], calls_[-1][1]] for calls_ in actions]
        for k in range(len(spans) - 1):  # glue between two actions of a run
            i = spans[k][1] + 1
            while i < spans[k + 1][0] and glue[i] in (IN_PLACE, ACCUMULATE):
                i += 1
            spans[k][1] = i - 1
            spans[k + 1][0] = i
        first, last = spans[0], spans[-1]
        i = first[0]
        while i > 0 and glue[i - 1] in (PREP, ACCUMULATE) and _same_step(step_ids, i - 1, first[0]):
            i -= 1
        while i < first[0] and glue[i] == ACCUMULATE:  # a sum before the views is a forward's
            i += 1
        first[0] = i
        j = last[1]
        while j + 1 < n and glue[j + 1] in (IN_PLACE, HANDOFF) and _same_step(step_ids, j + 1, last[1]):
            j += 1
        last[1] = j
        out.extend((a, b) for a, b in spans)
    return out


def _same_step(step_ids: np.ndarray | None, i: int, j: int) -> bool:
    return step_ids is None or step_ids[i] == step_ids[j]
