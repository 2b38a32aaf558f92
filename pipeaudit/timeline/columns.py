"""Every action of a set of ranks as sorted numpy columns, for the columnar audit.

One table per timeline (``Timeline.action_arrays()``): the actions of every rank, in the
order of ``Timeline.ranks``, each rank's actions grouped by step and, within a step, in
execution order (by compute start, then start, ties in the rank's table order: what
``Timeline.step_rows`` gives). Each (rank, step) group is a contiguous slice, so per-step and
per-rank work is numpy over slices instead of a filter or a Python loop per action.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import polars as pl

from pipeaudit.actions import KINDS, Action

#: ``kind`` codes: index in :data:`pipeaudit.actions.KINDS` (F B I W).
KIND_CODE = {k: i for i, k in enumerate(KINDS)}
F_CODE, B_CODE, I_CODE, W_CODE = (KIND_CODE[k] for k in KINDS)
#: ``step`` of an action outside every step (never equal to a real step).
NO_STEP = np.iinfo(np.int64).min


@dataclass
class ActionArrays:
    """The actions of ``ranks`` (see the module docstring). ``rank_index`` is the position of
    the row's rank in the timeline's ranks; ``row`` the row in that rank's own table."""

    ranks: list[int]
    rank_index: np.ndarray
    stage: np.ndarray
    kind: np.ndarray
    microbatch: np.ndarray
    step: np.ndarray
    start: np.ndarray
    compute_start: np.ndarray
    compute_end: np.ndarray
    compute_ns: np.ndarray
    row: np.ndarray
    #: ProfilerStep number of the action's step (:data:`NO_STEP` where none)
    profiler_step: np.ndarray

    @property
    def size(self) -> int:
        return int(self.stage.size)

    @cached_property
    def groups(self) -> dict[tuple[int, int], tuple[int, int]]:
        """(rank index, step) -> (first row, end row) of its contiguous slice."""
        if self.size == 0:
            return {}
        change = np.flatnonzero((np.diff(self.rank_index) != 0) | (np.diff(self.step) != 0)) + 1
        lo = np.concatenate([[0], change])
        hi = np.concatenate([change, [self.size]])
        return {(int(r), int(k)): (int(a), int(b)) for r, k, a, b in
                zip(self.rank_index[lo], self.step[lo], lo, hi)}

    def rows(self, rank_index: int, step: int) -> slice:
        """The rows of one rank's actions in one step (an empty slice when none)."""
        a, b = self.groups.get((rank_index, step), (0, 0))
        return slice(a, b)

    def order(self, rank_index: int, step: int) -> list[Action]:
        """One rank's actions of one step in execution order."""
        sl = self.rows(rank_index, step)
        return [Action(int(s), KINDS[k], int(m)) for s, k, m in
                zip(self.stage[sl], self.kind[sl], self.microbatch[sl])]

    @cached_property
    def stages_present(self) -> frozenset[int]:
        """Every stage that has an action."""
        return frozenset(int(s) for s in np.unique(self.stage))

    @cached_property
    def steps(self) -> list[int]:
        """Every step that holds an action, sorted."""
        return [int(k) for k in np.unique(self.step) if k != NO_STEP]

    def subset(self, rank_indices: list[int]) -> "ActionArrays":
        """The rows of some ranks (in this order), as the arrays of a timeline of those ranks."""
        bounds = np.searchsorted(self.rank_index, np.asarray(rank_indices, dtype=np.int64)[:, None]
                                 + np.array([0, 1])) if rank_indices else np.zeros((0, 2), int)
        pieces = [np.arange(lo, hi) for lo, hi in bounds.tolist()]
        rows = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)
        new_index = np.repeat(np.arange(len(pieces), dtype=np.int64), [p.size for p in pieces])

        def take(a: np.ndarray) -> np.ndarray:
            return a[rows]

        return ActionArrays(
            [self.ranks[i] for i in rank_indices], new_index, take(self.stage), take(self.kind),
            take(self.microbatch), take(self.step), take(self.start), take(self.compute_start),
            take(self.compute_end), take(self.compute_ns), take(self.row), take(self.profiler_step))

    def rank_stages(self, rank_index: int) -> list[int]:
        """The stages of one rank's actions, sorted."""
        return [int(s) for s in np.unique(self.stage[self.rank_rows(rank_index)])]

    def rank_rows(self, rank_index: int) -> slice:
        """The rows of one rank (every step)."""
        lo, hi = np.searchsorted(self.rank_index, [rank_index, rank_index + 1])
        return slice(int(lo), int(hi))


_EMPTY = np.zeros(0, dtype=np.int64)
_COLUMNS = ["stage", "kind", "microbatch", "step", "start", "compute_start", "compute_end",
            "compute_ns", "profiler_step"]


def action_arrays(ranks) -> ActionArrays:
    """The :class:`ActionArrays` of ``ranks`` (RankTimelines, in this order)."""
    frames, heights = [], []
    for rt in ranks:
        a = rt.actions
        heights.append(a.height)
        if a.height:
            frames.append(a)
    ids = [rt.rank for rt in ranks]
    if not frames:
        e = _EMPTY
        return ActionArrays(ids, e, e, e.astype(np.int8), e, e, e, e, e, e, e, e)
    h = np.asarray(heights, dtype=np.int64)
    try:
        t = pl.concat(frames, how="vertical")
    except (pl.exceptions.SchemaError, pl.exceptions.ShapeError):  # tables built elsewhere
        t = pl.concat([f.select(_COLUMNS) for f in frames], how="vertical_relaxed")
    t = t.select(
        "stage", pl.col("kind").replace_strict(KIND_CODE, default=-1, return_dtype=pl.Int8),
        "microbatch", pl.col("step").fill_null(NO_STEP), "start", "compute_start",
        "compute_end", "compute_ns", pl.col("profiler_step").fill_null(NO_STEP))
    rank_index = np.repeat(np.arange(len(ranks), dtype=np.int64), h)
    row = np.arange(t.height, dtype=np.int64) - np.repeat(np.cumsum(h) - h, h)
    cols = {c: t[c].to_numpy() for c in t.columns}
    order = np.lexsort((row, cols["start"], cols["compute_start"], cols["step"], rank_index))
    return ActionArrays(
        ids, rank_index[order], cols["stage"][order], cols["kind"][order],
        cols["microbatch"][order], cols["step"][order], cols["start"][order],
        cols["compute_start"][order], cols["compute_end"][order], cols["compute_ns"][order],
        row[order], cols["profiler_step"][order])
