"""Where to cut the model: the contiguous splits of L layers over S stages whose most loaded stage
is the least loaded possible, under a memory budget per stage.

A stage holding layers [i, j) costs the sum of those layers' costs, plus the first stage's extra
on stage 0 and the last stage's on stage S - 1 (:mod:`pipeaudit.explain.layer_costs`). Its memory
is the sum of its layers' memory (per stage: weights plus activations times the stage's
microbatches in flight) plus its fixed part, and must stay within its budget. The search is a
dynamic programme over (stage, first layer not yet placed): O(S L^2), vectorised over the
layers, so L = 128, S = 64 takes milliseconds (``benchmarks/split_search.py``), where the
splits number C(127, 63) ~ 10^37.

Many splits share the least bottleneck. :func:`best_splits` returns a few of them (the one that
cuts as early as possible, the one that cuts as late as possible, and, within the least bottleneck,
the one with the least sum of squared stage costs: the most level), for the caller to replay in full and rank by predicted step time.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations

import numpy as np

INF = float("inf")


def _segments(costs: Sequence[float]) -> np.ndarray:
    """seg[i, j] = sum of costs[i:j] (j > i); -1 elsewhere."""
    pre = np.concatenate([[0.0], np.cumsum(np.asarray(costs, dtype=float))])
    return pre[None, :] - pre[:, None]


def _dp(seg: np.ndarray, stages: int, fixed: Sequence[float], feasible: np.ndarray | None,
        late: bool, squares: bool = False) -> tuple[float, list[int]] | None:
    """Least bottleneck and its cut points (``late``: among equal choices, cut as late as
    possible; ``squares``: the least sum of squared stage costs instead)."""
    L = seg.shape[0] - 1
    idx = np.arange(L + 1)
    valid = idx[None, :] > idx[:, None]
    best = np.full(L + 1, INF)
    best[0] = 0.0
    back = np.zeros((stages, L + 1), dtype=int)
    for s in range(stages):
        cost = seg + fixed[s]
        cand = best[:, None] + cost * cost if squares else np.maximum(best[:, None], cost)
        ok = valid if feasible is None else valid & feasible[s]
        cand = np.where(ok, cand, INF)
        if late:
            arg = L - np.argmin(cand[::-1], axis=0)
        else:
            arg = np.argmin(cand, axis=0)
        best = cand[arg, idx]
        back[s] = arg
    if not np.isfinite(best[L]):
        return None
    cuts = [L]
    for s in range(stages - 1, 0, -1):
        cuts.append(int(back[s][cuts[-1]]))
    cuts.append(0)
    return float(best[L]), cuts[::-1]


def _layers(cuts: list[int]) -> tuple[int, ...]:
    return tuple(b - a for a, b in zip(cuts, cuts[1:]))


def stage_costs(split: Sequence[int], costs: Sequence[float], first_extra: float = 0.0,
                last_extra: float = 0.0) -> list[float]:
    """Each stage's cost under ``split`` (layers per stage)."""
    out, i = [], 0
    for n in split:
        out.append(float(sum(costs[i:i + n])))
        i += n
    out[0] += first_extra
    out[-1] += last_extra
    return out


def rank_balanced(split: Sequence[int], costs: Sequence[float], fe: float, le: float,
                  placement: Sequence[int], feasible: np.ndarray | None = None,
                  rounds: int = 1000) -> tuple[int, ...]:
    """``split`` improved for ranks holding several stages (``placement``: stage -> rank):
    one layer moved across one boundary at a time while that lowers (most loaded rank, most
    loaded stage, sum of squares); every stage keeps a layer and fits ``feasible``."""
    S = len(split)
    pre = [0.0]
    for c in costs:
        pre.append(pre[-1] + c)
    cur = list(split)
    bounds = [0]
    for n in cur:
        bounds.append(bounds[-1] + n)
    extra = [0.0] * S
    extra[0] += fe
    extra[-1] += le

    def cost(s: int, a: int, b: int) -> float:
        return pre[b] - pre[a] + extra[s]

    per = [cost(s, bounds[s], bounds[s + 1]) for s in range(S)]
    load: dict[int, float] = {}
    for s, c in enumerate(per):
        load[placement[s]] = load.get(placement[s], 0.0) + c
    best = (max(load.values()), max(per), sum(c * c for c in per))
    for _ in range(rounds):
        found = None
        for b in range(S - 1):
            for d in (1, -1):  # the boundary after stage b moves one layer back (1) or on
                mid = bounds[b + 1] - d
                if not bounds[b] < mid < bounds[b + 2]:
                    continue
                if feasible is not None and not (feasible[b][bounds[b], mid]
                                                 and feasible[b + 1][mid, bounds[b + 2]]):
                    continue
                cb, cn = cost(b, bounds[b], mid), cost(b + 1, mid, bounds[b + 2])
                ra, rb = placement[b], placement[b + 1]
                trial = dict(load)
                trial[ra] += cb - per[b]
                trial[rb] += cn - per[b + 1]
                stage_max = max(max(c for i, c in enumerate(per) if i not in (b, b + 1))
                                if S > 2 else 0.0, cb, cn)
                sq = best[2] - per[b] ** 2 - per[b + 1] ** 2 + cb * cb + cn * cn
                obj = (max(trial.values()), stage_max, sq)
                if obj < best and (found is None or obj < found[0]):
                    found = (obj, b, mid, cb, cn, trial)
        if found is None:
            break
        best, b, mid, cb, cn, load = found
        bounds[b + 1] = mid
        per[b], per[b + 1] = cb, cn
    return tuple(bounds[s + 1] - bounds[s] for s in range(S))


def best_splits(costs: Sequence[float], stages: int, first_extra: float = 0.0,
                last_extra: float = 0.0, memory: Sequence[Sequence[float]] | None = None,
                memory_fixed: Sequence[float] | None = None,
                budget: Sequence[float] | None = None,
                placement: Sequence[int] | None = None) -> list[tuple[int, ...]]:
    """Up to three splits of ``len(costs)`` layers over ``stages`` stages (layers per stage,
    each >= 1) with the least bottleneck stage cost, that fit: stage s's ``memory[s]`` (per
    layer) summed over its layers plus ``memory_fixed[s]`` within ``budget[s]``. Empty when
    no split fits (or there are fewer layers than stages). With ``placement`` (stage -> rank)
    where a rank holds several stages, each is also improved for the most loaded rank
    (:func:`rank_balanced`)."""
    L = len(costs)
    if stages < 1 or L < stages:
        return []
    seg = _segments(costs)
    fixed = [0.0] * stages
    fixed[0] += first_extra
    fixed[-1] += last_extra
    feasible = None
    if memory is not None and budget is not None:
        mfix = memory_fixed or [0.0] * stages
        feasible = np.stack([_segments(memory[s]) + mfix[s] <= budget[s] for s in range(stages)])
    out: list[tuple[int, ...]] = []
    early = _dp(seg, stages, fixed, feasible, late=False)
    if early is None:
        return []
    bottleneck, cuts = early
    out.append(_layers(cuts))
    late = _dp(seg, stages, fixed, feasible, late=True)
    if late is not None and _layers(late[1]) not in out:
        out.append(_layers(late[1]))
    # the least second-most-loaded stage: the bottleneck's own stages fixed, the rest levelled
    tight = None if feasible is None else feasible.copy()
    capped = (seg[None, :, :] + np.asarray(fixed)[:, None, None]) <= bottleneck * (1 + 1e-9)
    tight = capped if tight is None else tight & capped
    level = _dp(seg, stages, fixed, tight, late=False, squares=True)
    if level is not None and _layers(level[1]) not in out:
        out.append(_layers(level[1]))
    if placement is not None and len(set(placement)) < stages:
        for split in list(out):
            better = rank_balanced(split, costs, first_extra, last_extra, placement, feasible)
            if better not in out:
                out.append(better)
    return out


def brute_force(costs: Sequence[float], stages: int, first_extra: float = 0.0,
                last_extra: float = 0.0) -> tuple[float, list[tuple[int, ...]]]:
    """The least bottleneck over every contiguous split, and every split that reaches it (for
    tests and the benchmark: C(L - 1, S - 1) splits)."""
    L = len(costs)
    best, arg = INF, []
    for cut in combinations(range(1, L), stages - 1):
        split = _layers([0, *cut, L])
        b = max(stage_costs(split, costs, first_extra, last_extra))
        if b < best - 1e-12:
            best, arg = b, [split]
        elif abs(b - best) <= 1e-12:
            arg.append(split)
    return best, arg


def all_splits(layers: int, stages: int) -> list[tuple[int, ...]]:
    """Every contiguous split of ``layers`` over ``stages`` (each stage >= 1 layer)."""
    return [_layers([0, *cut, layers]) for cut in combinations(range(1, layers), stages - 1)]


def one_layer_moves(split: Sequence[int]) -> list[tuple[int, ...]]:
    """The splits one layer away from ``split``: one boundary moved back or on by a layer,
    every stage keeping at least one."""
    out = []
    for b in range(len(split) - 1):
        for d in (1, -1):
            sp = list(split)
            sp[b] -= d
            sp[b + 1] += d
            if min(sp) >= 1:
                out.append(tuple(sp))
    return out
