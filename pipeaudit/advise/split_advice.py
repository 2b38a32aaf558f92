"""The splits worth replaying for one candidate schedule, chunks and M: the per-layer costs of the
measured run (:mod:`pipeaudit.explain.layer_costs`) searched by
:func:`pipeaudit.advise.split_search.best_splits`, under the memory cap per rank.

Memory per stage follows its layers: its weights (as large as its gradients, one fp32 gradient
per parameter; where the readings hold them: a GPU's, not torch's CPU profiler's, which counts
from the start of profiling) and gradients, plus its activations times the microbatches the candidate's order
keeps in flight on it, plus the first and last stages' extras; a rank's other memory (its base
net of weights: data, buffers) and its backward's transient stay with the rank. With v stages
per rank the search gives each of a rank's stages the rank's budget less the least its other
stages need (one layer each): a bound, not the rank's sum; every proposal is then replayed in
full (:func:`pipeaudit.advise.memory.predicted_peaks`), and a rank that the
replay finds over the cap has its stages' budgets cut by the excess and the search runs again
(up to four times).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pipeaudit.advise.memory import RankMemory
from pipeaudit.advise.split_search import best_splits
from pipeaudit.explain.layer_costs import LayerModel, layer_model
from pipeaudit.explain.layers import Shares

#: the most budget cuts after a replay finds a proposal over the cap
RETRIES = 4


@dataclass(frozen=True)
class SplitModel:
    """The measured run's layers, as the search sees them."""

    old_layers: tuple[int, ...]
    time: LayerModel  #: per-layer compute (F + B) and the first/last stage's extras
    layer_cost: tuple[float, ...]  #: F + B compute per layer per microbatch (ns)
    first_extra: float
    last_extra: float
    memory: LayerModel | None  #: per-layer activations and gradients (None: no [memory])
    source: str  #: where the layers per stage came from

    def time_shares(self, split: Sequence[int]) -> Shares:
        return self.time.shares(split)

    def memory_shares(self, split: Sequence[int]) -> Shares | None:
        return None if self.memory is None else self.memory.shares(split)


def split_model(old_layers: Sequence[int], compute: Mapping[tuple[int, str], float],
                memory: Mapping[int, RankMemory] | None, source: str) -> SplitModel:
    """The per-layer model of a run whose stages held ``old_layers``, took ``compute`` (per
    (stage, kind), ns: the F + B of a microbatch; a split run's I + W count as its B) and, if
    read, held ``memory``."""
    S = len(old_layers)

    def fb(o: int) -> float:
        b = compute.get((o, "B"), 0.0) or compute.get((o, "I"), 0.0) + compute.get((o, "W"), 0.0)
        return compute.get((o, "F"), 0.0) + b

    per_stage = {o: fb(o) for o in range(S)}
    tm = layer_model(old_layers, [per_stage[o] for o in range(S)])
    first, last = tm.extras(per_stage)
    mm = None
    if memory is not None:
        stages = {s: t for m in memory.values() for s, t in m.stages.items()}
        if set(stages) == set(range(S)):
            mm = layer_model(old_layers, [max(stages[o].activation, 0.0) for o in range(S)])
    return SplitModel(tuple(old_layers), tm, tuple(tm.per_layer(per_stage)), first, last, mm,
                      source)


def in_flight(orders: Sequence[Sequence], num_stages: int) -> list[int]:
    """Most microbatches each stage holds at once in a catalogue order (forwards done minus
    microbatches whose last backward piece ran)."""
    out = [0] * num_stages
    for order in orders:
        live = [0] * num_stages
        for a in order:
            if a.kind == "F":
                live[a.stage] += 1
                out[a.stage] = max(out[a.stage], live[a.stage])
            elif a.kind in ("B", "W"):
                live[a.stage] -= 1
    return [max(1, n) for n in out]


def proposals(sm: SplitModel, sched, rows_ratio: float, memory: Mapping[int, RankMemory] | None,
              positions: Mapping[int, int], cap: int | None,
              peaks: Callable[[tuple[int, ...]], dict[int, int] | None],
              weights_move: bool = False) -> list[tuple[int, ...]]:
    """Splits of the model over ``sched``'s stages with the least bottleneck that fit ``cap``
    per the search's memory; ``peaks(split)`` replays one (rank -> peak) to check it. A split
    the replay finds over the cap is dropped after :data:`RETRIES` budget cuts."""
    S = sched.num_stages
    L = sum(sm.old_layers)
    if L < S:
        return []
    if cap is None or memory is None or sm.memory is None:
        return best_splits(sm.layer_cost, S, sm.first_extra, sm.last_extra,
                           placement=sched.placement)
    stages = {s: t for m in memory.values() for s, t in m.stages.items()}
    olds = range(len(sm.old_layers))
    act = {o: stages[o].activation * rows_ratio for o in olds}
    grads = {o: stages[o].grads for o in olds}
    a_layer, g_layer = sm.memory.per_layer(act), sm.memory.per_layer(grads)
    (a_first, a_last), (g_first, g_last) = sm.memory.extras(act), sm.memory.extras(grads)
    flight = in_flight(sched.orders, S)
    held = 2 if weights_move else 1  # weights (where the base holds them) and gradients
    budget_rank = {p: cap - (m.base - (m.grads if held == 2 else 0))
                   - m.backward_peak * rows_ratio
                   for r, m in memory.items() for p in [positions.get(r, r)]}
    cut = {p: 0.0 for p in budget_rank}
    for _ in range(RETRIES + 1):
        per_layer = [[flight[s] * a + held * g for a, g in zip(a_layer, g_layer)] for s in range(S)]
        fixed = [0.0] * S
        fixed[0] += flight[0] * a_first + held * g_first
        fixed[-1] += flight[-1] * a_last + held * g_last
        # a stage may use its rank's budget less the least its other stages need (one layer)
        least = [min(per_layer[s]) + fixed[s] for s in range(S)]
        budget = [budget_rank.get(p, float("inf")) - cut.get(p, 0.0)
                  - sum(least[t] for t in range(S) if t != s and sched.placement[t] == p)
                  for s, p in enumerate(sched.placement)]
        found = best_splits(sm.layer_cost, S, sm.first_extra, sm.last_extra, per_layer, fixed,
                            budget, sched.placement)
        if not found:
            return []
        fitting, over = [], {}
        for split in found:
            got = peaks(split)
            worst = {p: got[r] - cap for r, p in positions.items() if got and got.get(r, 0) > cap}
            if worst:
                for p, x in worst.items():
                    over[p] = max(over.get(p, 0.0), x)
            else:
                fitting.append(split)
        if fitting:
            return fitting
        for p, x in over.items():
            cut[p] = cut.get(p, 0.0) + x
    return []
