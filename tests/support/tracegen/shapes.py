"""Op shapes: the op sequence of each stage's forward, backward, input- and weight-backward.

A stage is a list of layers; a layer is a list of top-level ops, each with a duration (µs) and
optionally nested children (what torch's profiler writes under ``aten::linear`` and the like).
The backward of a layer is its ops' autograd functions in reverse order, as torch's autograd
engine runs them (``autograd::engine::evaluate_function: AddmmBackward0`` ...); split backward
puts the input-gradient functions in I and the weight-gradient ones in W.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

#: op shape variants the generator draws
OP_SHAPES = ("distinct", "repeated", "tied", "equal", "dominant")


@dataclass(frozen=True)
class Op:
    """A top-level op: name, duration (µs), children (name, start fraction, length fraction)."""

    name: str
    dur: float
    children: tuple[tuple[str, float, float], ...] = ()


#: forward op -> (base µs, children, backward function, its aten op, has weight)
_FWD = {
    "aten::linear": (400.0, (("aten::t", 0.0, 0.02), ("aten::addmm", 0.03, 0.95)),
                     "AddmmBackward0", "aten::mm", True),
    "aten::layer_norm": (60.0, (("aten::native_layer_norm", 0.02, 0.95),),
                         "NativeLayerNormBackward0", "aten::native_layer_norm_backward", True),
    "aten::gelu": (80.0, (), "GeluBackward0", "aten::gelu_backward", False),
    "aten::add": (20.0, (), "AddBackward0", "", False),
    "aten::scaled_dot_product_attention": (
        300.0, (("aten::_scaled_dot_product_flash_attention_for_cpu", 0.02, 0.96),),
        "ScaledDotProductFlashAttentionForCpuBackward0",
        "aten::_scaled_dot_product_flash_attention_for_cpu_backward", False),
    "aten::relu": (30.0, (), "ReluBackward0", "aten::threshold_backward", False),
    "aten::matmul": (250.0, (("aten::mm", 0.02, 0.96),), "MmBackward0", "aten::mm", False),
    "aten::softmax": (50.0, (("aten::_softmax", 0.02, 0.9),), "SoftmaxBackward0",
                      "aten::_softmax_backward_data", False),
}
_LAYER_KINDS = (
    ("aten::layer_norm", "aten::linear", "aten::gelu", "aten::linear", "aten::add"),
    ("aten::layer_norm", "aten::linear", "aten::scaled_dot_product_attention", "aten::linear",
     "aten::add"),
    ("aten::linear", "aten::relu", "aten::linear"),
    ("aten::linear", "aten::softmax", "aten::matmul", "aten::add"),
    ("aten::linear", "aten::gelu"),
)
LOSS = (Op("aten::mse_loss", 40.0, (("aten::mean", 0.3, 0.5),)),)
LOSS_ALT = (Op("aten::cross_entropy_loss", 60.0, (("aten::log_softmax", 0.05, 0.5),
                                                     ("aten::nll_loss_nd", 0.6, 0.35))),)
LOAD = (Op("aten::to", 30.0, (("aten::_to_copy", 0.05, 0.9),)),
        Op("aten::embedding", 50.0, (("aten::index_select", 0.05, 0.9),)))


@dataclass(frozen=True)
class StageOps:
    """The ops of one stage's actions (without the per-microbatch jitter)."""

    fwd: tuple[Op, ...]
    bwd: tuple[Op, ...]
    inp: tuple[Op, ...]  #: I: input-gradient half of bwd (empty on the first stage)
    wgt: tuple[Op, ...]  #: W: weight-gradient half (the whole backward on the first stage)


def _bwd_of(op_name: str, dur: float, nested: bool) -> tuple[list[Op], list[Op], list[Op]]:
    """(full backward, input-gradient, weight-gradient) ops of one forward op."""
    _, _, fn, aten, weight = _FWD[op_name]
    ch = ((fn, 0.01, 0.97),) if nested else ()
    if aten and nested:
        ch = ch + ((aten, 0.03, 0.9),)
    ev = "autograd::engine::evaluate_function: "
    acc = Op(ev + "torch::autograd::AccumulateGrad", 4.0,
             (("torch::autograd::AccumulateGrad", 0.05, 0.8),) if nested else ())
    if not weight:
        one = [Op(ev + fn, dur * 2.0, ch)]
        return one, one, []
    return ([Op(ev + fn, dur * 2.0, ch), acc], [Op(ev + fn, dur, ch)],
            [Op(ev + fn, dur, ch), acc])


def stage_ops(rng: random.Random, n_stages: int, shape: str, nested: bool, loss: bool,
              data_load: bool, heavy: dict[int, float], layers: dict[int, int]) -> list[StageOps]:
    """Ops of every stage. ``heavy``: stage -> duration factor; ``layers``: stage -> layers."""
    base_kind = rng.randrange(len(_LAYER_KINDS))
    dominant = rng.randrange(len(_LAYER_KINDS[base_kind]))
    tied: dict[str, float] = {}
    out = []
    for s in range(n_stages):
        fwd: list[Op] = []
        if data_load and s == 0:
            fwd += [Op(o.name, o.dur * rng.uniform(0.5, 2), o.children if nested else ())
                    for o in LOAD[: rng.randint(1, 2)]]
        n_layers = layers.get(s, 1)
        kind = base_kind if shape != "distinct" else rng.randrange(len(_LAYER_KINDS))
        for _ in range(n_layers):
            if shape == "distinct":
                kind = rng.randrange(len(_LAYER_KINDS))
            for i, name in enumerate(_LAYER_KINDS[kind]):
                base = _FWD[name][0]
                if shape == "equal":
                    d = 100.0
                elif shape == "tied":
                    d = tied.setdefault(name, base * rng.uniform(0.5, 2))
                elif shape == "dominant":
                    d = base * (20.0 if i == dominant else 0.3)
                else:
                    d = base * rng.uniform(0.5, 2)
                ch = _FWD[name][1] if nested else ()
                fwd.append(Op(name, d * heavy.get(s, 1.0), ch))
        if loss and s == n_stages - 1:
            fwd += list(rng.choice((LOSS, LOSS_ALT)))
        full: list[Op] = []
        inp: list[Op] = []
        wgt: list[Op] = []
        for op in reversed([o for o in fwd if o.name in _FWD]):
            f, i, w = _bwd_of(op.name, op.dur, nested)
            full += f
            inp += i
            wgt += w
        if loss and s == n_stages - 1:
            lb = Op("autograd::engine::evaluate_function: MseLossBackward0", 30.0,
                    (("MseLossBackward0", 0.02, 0.95),) if nested else ())
            full.insert(0, lb)
            inp.insert(0, lb)
        if s == 0:  # the first stage's input needs no gradient: I is empty, W is the backward
            inp, wgt = [], full
        out.append(StageOps(tuple(fwd), tuple(full), tuple(inp), tuple(wgt)))
    return out


#: the gradient seed the last stage's backward starts with (the backward's, not the forward's)
SEED = Op("aten::ones_like", 6.0, (("aten::empty_like", 0.1, 0.4), ("aten::fill_", 0.6, 0.3)))
