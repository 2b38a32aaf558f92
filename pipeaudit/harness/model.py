"""The synthetic model the harness trains (imports torch).

A stack of ``layers`` pre-norm MLP blocks ``x + fc2(gelu(fc1(ln(x))))`` split
into contiguous slices, one per global stage (see ``ProfileConfig.stage_layers``).

Imbalance: ``--imbalance STAGE=k`` gives that stage k blocks, each with its own weights, for
every block of an equal stage: a heavier stage, in every pipeline replica. Its forward and
backward compute are exactly k times those of an equal stage (the same matmuls, k times), and
so are its weights, gradients and activations. ``--slow-rank RANK=k`` makes one rank slower,
not its model: each block of its stages is applied k times in a row (the same weights,
``x = block(x)`` repeated), so its data-parallel peers hold the same parameters. Both given,
the factors multiply. Only integer factors are accepted.

A heavy layer: ``--heavy-layer K:F`` makes layer K F blocks with their own weights (F times
its compute, weights and activations) on whichever stage holds it; ``--stage-layers`` says how
many layers each stage holds (``ProfileConfig.stage_layers``).

Distinct weights for the heavier stage are what the zero-bubble schedules need: torch's split
backward (ZBV's I then W) cannot take the weight gradients of a block applied several times in
one forward ("backward through the graph a second time").
"""

from __future__ import annotations

import torch
import torch.utils.checkpoint
from torch import nn

from pipeaudit.harness.config import ProfileConfig


class Block(nn.Module):
    """Pre-norm residual MLP block."""

    def __init__(self, hidden: int, ffn_mult: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, ffn_mult * hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(ffn_mult * hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(self.act(self.fc1(self.norm(x))))


class StageModule(nn.Module):
    """The blocks of one stage; each block applied ``repeat`` times (a slow rank), its forward
    recomputed in the backward with ``checkpoint`` (activation checkpointing)."""

    def __init__(self, stage: int, num_blocks: int, hidden: int, ffn_mult: int, repeat: int = 1,
                 checkpoint: bool = False):
        super().__init__()
        self.stage = stage
        self.repeat = repeat
        self.checkpoint = checkpoint
        self.blocks = nn.ModuleList(Block(hidden, ffn_mult) for _ in range(num_blocks))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            for _ in range(self.repeat):
                if self.checkpoint and torch.is_grad_enabled():
                    x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
                else:
                    x = block(x)
        return x


def build_stage_module(config: ProfileConfig, stage: int, device: torch.device,
                       rank: int | None = None) -> StageModule:
    """The module of global stage ``stage`` as ``rank`` runs it; weights depend only on
    (seed, stage).

    The stage holds ``--imbalance`` times its layers' blocks (a heavier stage; a
    ``--heavy-layer`` counts its factor in blocks), each applied
    ``--slow-rank`` times on ``rank`` (a slower rank; None: not slowed).
    """
    gen_state = torch.random.get_rng_state()
    torch.manual_seed(config.seed * 100_003 + stage)
    try:
        module = StageModule(
            stage,
            sum(config.layer_blocks(stage)),
            config.model.hidden,
            config.model.ffn_mult,
            config.slow_ranks.get(rank, 1) if rank is not None else 1,
            config.model.activation_checkpointing,
        )
    finally:
        torch.random.set_rng_state(gen_state)
    return module.to(device)


def make_batch(config: ProfileConfig, device: torch.device,
               replica: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Fixed (input, target) of shape (batch_size, seq_len, hidden) of one pipeline replica.

    The same on every rank of a replica; each data-parallel replica has its own data
    (replica 0's is the data of a run without data parallelism).
    """
    gen = torch.Generator().manual_seed(config.seed + 1_000_003 * replica)
    shape = (config.batch_size, config.model.seq_len, config.model.hidden)
    x = torch.randn(shape, generator=gen)
    y = torch.randn(shape, generator=gen)
    return x.to(device), y.to(device)


def loss_fn(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return nn.functional.mse_loss(output, target)
