"""Per-layer cost model: what each layer of a measured run costs, apart from what only the first
and the last stage carry.

A measured stage's value (a kind's duration, an activation, the gradients) is the sum of its
layers' values, plus, on the first and the last stage alone, a fixed extra (the embedding and the
data load; the head and the loss). One run gives one value per stage: it cannot tell every
layer apart, so the model assumes

- every layer of an inner stage (neither first nor last) costs that stage's value over its
  layers (a heavier inner stage keeps its heavier layers);
- a layer of the first or last stage costs the *reference* per-layer value: the median over
  the inner stages of value / layers (linear in the stages' values: the middle stage's, or the
  mean of the two middle ones);
- the first (last) stage's extra is its value minus its layers x the reference, when that is
  positive on the stage's total compute; else that stage has no extra and its layers cost its
  value over its layers.

Without an inner stage (two stages) the extras cannot be told from the layers
(:attr:`LayerModel.separated` is False and the report says so). The model then takes the lighter
stage's value per layer (by ``cost``) as every layer's, and the heavier stage's excess as its
extra: what makes one end stage heavier is most often what only it carries (the embedding and
data load, the head and loss), which no split moves. A heavy layer inside that stage looks the
same; a rerun at the proposed split tells. An even split of the layers gives no leverage
either way: the inner stages' layer counts are what separates the two.

Every layer's value, and every extra, is a linear combination of the measured stages' values
(:class:`LayerModel`'s weights), so one model re-stages any per-stage table (time per kind,
memory terms) into any contiguous split (:meth:`LayerModel.shares`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pipeaudit.explain.layers import Shares

Weights = dict[int, float]  #: old stage -> weight


def _add(into: Weights, w: Mapping[int, float], f: float = 1.0) -> None:
    for o, x in w.items():
        into[o] = into.get(o, 0.0) + f * x


@dataclass(frozen=True)
class LayerModel:
    """Each layer's and each extra's value as weights on the measured stages' values."""

    old_layers: tuple[int, ...]
    layer: tuple[Weights, ...]  #: per layer of the model, in order
    first_extra: Weights  #: what only the first stage carries
    last_extra: Weights  #: what only the last stage carries
    separated: bool  #: False: no inner stage, extras not told apart from layers
    reference: Weights  #: the reference per-layer value (two stages: the lighter one's; one: empty)

    @property
    def num_layers(self) -> int:
        return len(self.layer)

    def per_layer(self, values: Mapping[int, float]) -> list[float]:
        """Each layer's value for per-old-stage ``values``."""
        return [max(0.0, sum(f * values[o] for o, f in w.items())) for w in self.layer]

    def extras(self, values: Mapping[int, float]) -> tuple[float, float]:
        """The first and last stage's extras for per-old-stage ``values`` (never negative)."""
        return (max(0.0, sum(f * values[o] for o, f in self.first_extra.items())),
                max(0.0, sum(f * values[o] for o, f in self.last_extra.items())))

    def shares(self, new_layers: Sequence[int]) -> Shares:
        """For a contiguous split ``new_layers`` (layers per new stage), each new stage's
        weights on the old stages: its layers, plus the extras on the first and last."""
        if sum(new_layers) != self.num_layers:
            raise ValueError(f"split {list(new_layers)} does not hold {self.num_layers} layers")
        out: Shares = {}
        first = 0
        last_stage = len(new_layers) - 1
        for s, n in enumerate(new_layers):
            w: Weights = {}
            for layer in range(first, first + n):
                _add(w, self.layer[layer])
            if s == 0:
                _add(w, self.first_extra)
            if s == last_stage:
                _add(w, self.last_extra)
            out[s] = {o: x for o, x in w.items() if abs(x) > 1e-12}
            first += n
        return out

    def describe(self) -> str:
        """One sentence: how the layers' and the extras' values were told apart."""
        if not self.separated:
            if len(self.old_layers) == 1:
                return "one stage: each layer costs the stage's value over its layers"
            return ("two stages, none inner: the extras (embedding, data load, head, loss) "
                    "cannot be told from the layers; assumed: every layer costs the lighter "
                    "stage's value per layer and the heavier stage's excess is its extra, which "
                    "stays with it (a heavy layer inside that stage looks the same: a rerun "
                    "tells)")
        what = []
        for name, w in (("first", self.first_extra), ("last", self.last_extra)):
            what.append(f"the {name} stage's extra = its value - its layers x the reference"
                        if w else f"the {name} stage has no extra (its layers cost no more "
                        "than the reference)")
        return ("per layer: inner stages' value over their layers; the first and last stages' "
                "layers at the reference (the median over the inner stages of value per "
                "layer); " + "; ".join(what))


def _reference(old_layers: Sequence[int], cost: Sequence[float]) -> Weights:
    """The median over the inner stages of value per layer, as weights (the middle stage, or
    the mean of the two middle ones, ranked by ``cost`` per layer); with two stages, none
    inner, the lighter stage's."""
    if len(old_layers) == 2:
        light = min((0, 1), key=lambda o: cost[o] / old_layers[o])
        return {light: 1.0 / old_layers[light]}
    inner = sorted(range(1, len(old_layers) - 1), key=lambda o: cost[o] / old_layers[o])
    mid = len(inner) // 2
    picks = inner[mid:mid + 1] if len(inner) % 2 else inner[mid - 1:mid + 1]
    return {o: 1.0 / old_layers[o] / len(picks) for o in picks}


def layer_model(old_layers: Sequence[int], cost: Sequence[float]) -> LayerModel:
    """The model for a run whose stages held ``old_layers`` and took ``cost`` (a total per
    stage, e.g. its compute per step: it decides whether the first and last stage carry an
    extra; the weights then apply to any per-stage value)."""
    S = len(old_layers)
    own = [{o: 1.0 / n} for o, n in enumerate(old_layers)]  # a layer at its stage's value per layer
    if S == 1:
        return LayerModel(tuple(old_layers), tuple(dict(own[0]) for _ in range(old_layers[0])),
                          {}, {}, False, {})
    ref = _reference(old_layers, cost)
    ref_cost = sum(f * cost[o] for o, f in ref.items())
    extra: dict[int, Weights] = {}
    for o in (0, S - 1):
        if o not in ref and cost[o] - old_layers[o] * ref_cost > 0:
            w = {o: 1.0}
            _add(w, ref, -old_layers[o])
            extra[o] = w
    layer = []
    for o, n in enumerate(old_layers):
        per = ref if o in extra else own[o]
        layer += [dict(per) for _ in range(n)]
    return LayerModel(tuple(old_layers), tuple(layer), extra.get(0, {}), extra.get(S - 1, {}),
                      S > 2, ref)
