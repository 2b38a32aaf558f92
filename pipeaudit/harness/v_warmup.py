"""V-shaped schedules on torch releases whose connection warm-up sends to the rank itself.

Before its first step, a multi-stage schedule sends one number from each stage to the
next stage's rank and back, to connect the pairs. In torch 2.11 (``_initialize_stages``)
every stage does this, also where the next stage is on the same rank, as in a V placement
(ZBV, DualPipeV: stages P-1 and P share rank P-1). Gloo has no pair from a rank to itself
and fails ("Pair is not connected") before any step. Torch 2.13 replaced that warm-up by a
vote between neighbours (``_warmup_forward_vote``) and passes same-rank stages' data in
place, so nothing changes there.

:func:`skip_self_warmup` leaves out, on the older releases, the warm-up operations whose
peer is the rank itself; the ones to other ranks stay, so both ends of every pair still
match. The schedule's own steps already pass same-rank activations and gradients in place.
"""

from __future__ import annotations

from typing import Any


def needs_self_warmup_skip(stage_cls: type) -> bool:
    """True for a torch ``PipelineStage`` class whose schedules warm up every neighbour pair."""
    return (hasattr(stage_cls, "_get_init_p2p_neighbors_ops")
            and not hasattr(stage_cls, "_warmup_forward_vote"))


def skip_self_warmup(stage: Any) -> None:
    """Drop ``stage``'s warm-up sends and receives whose peer is its own rank (torch < 2.13)."""
    if not needs_self_warmup_skip(type(stage)):
        return
    import torch.distributed as dist

    own = dist.get_rank()  # P2POp.peer is a global rank
    original = stage._get_init_p2p_neighbors_ops

    def ops_to_others() -> list:
        return [op for op in original() if op.peer != own]

    stage._get_init_p2p_neighbors_ops = ops_to_others
