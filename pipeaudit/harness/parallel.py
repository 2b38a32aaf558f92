"""Tensor and data parallelism on one stage module (imports torch).

As torchtitan applies them, in this order:

* tensor parallel (``--tp``): each block's MLP with DTensor ``parallelize_module``:
  ``fc1`` column-wise, ``fc2`` row-wise (one all-reduce of the block's output in the forward,
  one of the input gradient in the backward); LayerNorm stays replicated. The stage's input and
  output stay plain, replicated tensors, so the pipeline's P2P is unchanged.
* data parallel (``--dp``): ``fsdp``: FSDP2 ``fully_shard`` on the stage module with
  ``reshard_after_forward=False`` (torchtitan's default under pipeline parallelism: no
  all-gather per microbatch); ``ddp``: ``DistributedDataParallel`` over the dp group.
  torch.distributed.pipelining turns gradient sync off for all but the last backward (DDP
  ``no_sync``; FSDP ``set_requires_gradient_sync(False)``) and reduces once per step.

  DDP gets ``find_unused_parameters=True``: without it, DDP rebuilds its gradient buckets after
  the first step from the gradients it saw become ready, which under pipelining (torch 2.13)
  are not all of them, and the second step fails (``rebuilt parameter indices size is not same
  as original model parameters size``) for gpipe, 1f1b with M = P, interleaved-1f1b and zbv.
  DualPipeV does not run with DDP at all (refused before start).

  One FSDP unit per stage, where torchtitan wraps each transformer block and then the root:
  torch 2.13's pipelining runs a real forward and backward at its first step to infer shapes,
  with FSDP's default resharding after backward, so a per-block unit applied several times
  (``--slow-rank``) all-gathers again for every application there; a slowed rank would then
  run more all-gathers than its data-parallel peers and hang them.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh


def apply_tensor_parallel(module: nn.Module, tp_mesh: DeviceMesh) -> None:
    """Shard every block's fc1 by columns and fc2 by rows over ``tp_mesh`` (in place)."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    for block in module.blocks:
        parallelize_module(block, tp_mesh, {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})


def apply_data_parallel(module: nn.Module, dp_mesh: DeviceMesh, mode: str,
                        device: torch.device) -> nn.Module:
    """Wrap ``module`` for data parallelism over ``dp_mesh``; returns the module to train."""
    if mode == "fsdp":
        from torch.distributed.fsdp import fully_shard

        fully_shard(module, mesh=dp_mesh, reshard_after_forward=False)
        return module
    if mode == "ddp":
        device_ids = [device] if device.type == "cuda" else None
        return nn.parallel.DistributedDataParallel(
            module, process_group=dp_mesh.get_group(), device_ids=device_ids,
            find_unused_parameters=True)
    raise ValueError(f"unknown data-parallel mode {mode!r}")
