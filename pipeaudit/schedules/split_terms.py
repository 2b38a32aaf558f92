"""A layer split in each framework's own terms. Every name was checked in the framework's source:

- torch.distributed.pipelining (2.13): ``pipeline(module, mb_args, split_spec=...)`` with
  ``SplitPoint.BEGINNING`` at each stage's first layer, or ``PipelineStage(submodule,
  stage_index, num_stages, device)`` per stage module;
- torchtitan (``[parallelism]`` in ``torchtitan/config``): ``module_fqns_per_model_part`` (a
  list per stage of module FQNs; its Llama models name ``tok_embeddings``, ``layers.N``,
  ``norm``, ``output``); its ``pipeline_parallel_first_stage_less_layers`` /
  ``pipeline_parallel_last_stage_less_layers`` express only fewer layers on the ends;
- Megatron-core (0.16 ``TransformerConfig``): ``num_layers_in_first_pipeline_stage`` and
  ``num_layers_in_last_pipeline_stage`` when the inner stages are even and there are no
  virtual stages, else ``pipeline_model_parallel_layout`` (``E`` embedding, ``t`` a decoder
  layer, ``L`` the loss, ``|`` between stages, stages in virtual-stage-major order, as
  ``PipelineParallelLayerLayout`` reads it);
- DeepSpeed (0.19 ``PipelineModule``): ``partition_method`` takes ``"uniform"``,
  ``"parameters"`` or ``"type:REGEX"``, no explicit parts; an exact split is one
  ``LayerSpec`` per stage (its layers as one module) with ``partition_method="uniform"``.
"""

from __future__ import annotations

from collections.abc import Sequence


def _starts(split: Sequence[int]) -> list[int]:
    out, acc = [], 0
    for n in split:
        out.append(acc)
        acc += n
    return out


def megatron_layout(split: Sequence[int]) -> str:
    """Megatron-core's ``pipeline_model_parallel_layout`` string for ``split`` (stages in
    global stage order)."""
    parts = ["t" * n for n in split]
    parts[0] = "E" + parts[0]
    parts[-1] = parts[-1] + "L"
    return "|".join(parts)


def megatron_first_last(split: Sequence[int], ranks: int) -> tuple[int, int] | None:
    """(first, last) stage layer counts when Megatron-core's two options express ``split``
    (one stage per rank, inner stages even); None otherwise."""
    if len(split) != ranks or ranks < 2:
        return None
    if ranks == 2:
        return split[0], split[1]
    inner = set(split[1:-1])
    return (split[0], split[-1]) if len(inner) == 1 else None


def split_lines(split: Sequence[int], ranks: int) -> list[str]:
    """The lines that run ``split`` (layers per stage in stage order over ``ranks`` ranks)."""
    starts = _starts(split)
    spec = ", ".join(f'"layers.{s}": SplitPoint.BEGINNING' for s in starts[1:])
    fqns = []
    for i, (a, n) in enumerate(zip(starts, split)):
        names = [f'"layers.{k}"' for k in range(a, a + n)]
        if i == 0:
            names.insert(0, '"tok_embeddings"')
        if i == len(split) - 1:
            names += ['"norm"', '"output"']
        fqns.append("[" + ", ".join(names) + "]")
    out = [f"layer split: {','.join(map(str, split))} layers per stage (stage order)",
           f"  torch.distributed.pipelining: pipeline(model, mb_args, split_spec={{{spec}}}); "
           "or stage s = PipelineStage(the layers "
           + ", ".join(f"{a}-{a + n - 1}" if n > 1 else f"{a}" for a, n in zip(starts, split))
           + " as one module, s, num_stages, device)",
           f"  torchtitan: [parallelism] module_fqns_per_model_part = [{', '.join(fqns)}]"]
    fl = megatron_first_last(split, ranks)
    if fl is not None:
        out.append(f"  Megatron-core: num_layers_in_first_pipeline_stage={fl[0]}, "
                   f"num_layers_in_last_pipeline_stage={fl[1]}")
    else:
        out.append(f"  Megatron-core: pipeline_model_parallel_layout=\"{megatron_layout(split)}\"")
    if len(split) == ranks:
        out.append("  DeepSpeed: PipelineModule(layers=[one LayerSpec per stage: layers "
                   + ", ".join(f"{a}-{a + n - 1}" if n > 1 else f"{a}"
                               for a, n in zip(starts, split))
                   + "], partition_method=\"uniform\") (partition_method takes uniform, "
                   "parameters or type:REGEX, no explicit parts)")
    return out
