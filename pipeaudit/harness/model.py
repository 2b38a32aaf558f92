"""The synthetic model the harness trains (imports torch).

A stack of ``layers`` pre-norm MLP blocks ``x + fc2(gelu(fc1(ln(x))))`` split
into contiguous slices, one per global stage (see ``ProfileConfig.stage_layers``).

Imbalance: a stage with factor k applies each of its blocks k times in a row
(same weights, ``x = block(x)`` repeated). Forward and backward compute of that
stage are therefore exactly k times those of an equal stage (the block's
matmuls dominate; parameters and memory for weights do not change, activation
memory grows k times). Only integer factors are accepted for that reason.
``--imbalance STAGE=k`` does it to a stage in every pipeline replica,
``--slow-rank RANK=k`` to the stages of one rank only (both given: the factors multiply).
"""

from __future__ import annotations

import torch
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
    """The blocks of one stage; each block applied ``repeat`` times (imbalance)."""

    def __init__(self, stage: int, num_blocks: int, hidden: int, ffn_mult: int, repeat: int = 1):
        super().__init__()
        self.stage = stage
        self.repeat = repeat
        self.blocks = nn.ModuleList(Block(hidden, ffn_mult) for _ in range(num_blocks))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            for _ in range(self.repeat):
                x = block(x)
        return x


def build_stage_module(config: ProfileConfig, stage: int, device: torch.device,
                       repeat: int | None = None) -> StageModule:
    """The module of global stage ``stage``; weights depend only on (seed, stage).

    ``repeat``: how many times each block is applied (default: the stage's ``--imbalance``).
    """
    gen_state = torch.random.get_rng_state()
    torch.manual_seed(config.seed * 100_003 + stage)
    try:
        module = StageModule(
            stage,
            config.stage_layers[stage],
            config.model.hidden,
            config.model.ffn_mult,
            repeat if repeat is not None else config.imbalance.get(stage, 1),
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
