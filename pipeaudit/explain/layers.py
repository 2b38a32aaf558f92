"""Which of the measured stages' layers a candidate's stages hold.

When the run says how many layers each stage held (the manifest's ``stage_layers``, written by
``pipeaudit profile``), a re-staged candidate is re-derived per layer: each layer costs (time,
activations) its measured stage's value divided evenly over that stage's layers, and the
candidate's stages take the model's layers contiguously, as evenly as possible, the earlier
stages taking the extra ones (as the harness and torchtitan's default split do). So a heavy
layer stays heavy and lands on the rank that holds it in the candidate, not on the rank that
held it in the run. Without ``stage_layers`` the caller falls back to splitting each rank's
measured work evenly over its new stages.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pipeaudit.errors import ConfigError

#: new stage -> {old stage: the fraction of the old stage's value it holds}
Shares = dict[int, dict[int, float]]


def even_layers(total: int, stages: int) -> list[int]:
    """Layers per stage for ``total`` layers over ``stages``: contiguous, as even as possible,
    the earlier stages taking the extra ones."""
    base, extra = divmod(total, stages)
    return [base + (1 if s < extra else 0) for s in range(stages)]


def manifest_layers(manifest: Mapping | None, num_stages: int) -> list[int] | None:
    """The measured stages' layer counts from ``manifest``, None when it does not give one
    positive count per stage."""
    layers = (manifest or {}).get("stage_layers")
    if (not isinstance(layers, list) or len(layers) != num_stages
            or not all(isinstance(x, int) and x > 0 for x in layers)):
        return None
    return list(layers)


def candidate_layers(old_layers: Sequence[int], new_stages: int,
                     given: Sequence[int] | None = None) -> list[int]:
    """A candidate's layers per stage: ``given`` (checked), else as even as possible."""
    total = sum(old_layers)
    if given is None:
        return even_layers(total, new_stages)
    given = list(given)
    if len(given) != new_stages or sum(given) != total or min(given) < 1:
        raise ConfigError(f"stage layers {','.join(map(str, given))}: need {new_stages} stages "
                          f"of at least one layer each, {total} layers in all")
    return given


def layer_shares(old_layers: Sequence[int], new_stages: int) -> Shares | None:
    """For each of ``new_stages`` stages (the same layers split evenly), the fraction of each
    measured stage it holds; None when the model has fewer layers than ``new_stages``."""
    total = sum(old_layers)
    if total < new_stages:
        return None
    owner = [s for s, n in enumerate(old_layers) for _ in range(n)]  # layer -> old stage
    out: Shares = {}
    first = 0
    for s, n in enumerate(even_layers(total, new_stages)):
        share: dict[int, float] = {}
        for layer in range(first, first + n):
            o = owner[layer]
            share[o] = share.get(o, 0.0) + 1.0 / old_layers[o]
        out[s] = share
        first += n
    return out


def restage(values: Mapping[int, float], shares: Shares) -> dict[int, float]:
    """Per new stage, the sum of its layers' values (``values``: per old stage)."""
    return {s: sum(f * values[o] for o, f in share.items()) for s, share in shares.items()}
