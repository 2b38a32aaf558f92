"""The connection warm-up of V-placed stages on torch releases that send it to the rank itself."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
from torch.distributed.pipelining import PipelineStage  # noqa: E402

from pipeaudit.harness.v_warmup import needs_self_warmup_skip, skip_self_warmup  # noqa: E402


class OldStage:
    """A stage with torch 2.11's warm-up (every neighbour pair) and no neighbour vote."""

    def __init__(self, peers: list[int]) -> None:
        self.peers = peers

    def _get_init_p2p_neighbors_ops(self) -> list:
        return [SimpleNamespace(peer=p) for p in self.peers]


class NewStage(OldStage):
    """A stage with torch 2.13's neighbour vote."""

    def _warmup_forward_vote(self) -> None:  # pragma: no cover - never called
        pass


def test_installed_torch_is_recognised_by_its_vote():
    assert needs_self_warmup_skip(PipelineStage) == (
        not hasattr(PipelineStage, "_warmup_forward_vote"))
    assert needs_self_warmup_skip(OldStage)
    assert not needs_self_warmup_skip(NewStage)


def test_old_warmup_loses_only_the_ops_to_its_own_rank():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        # the V's turn rank: receive from its left neighbour, pass to itself twice (the
        # send of stage P-1 and the receive of stage P), send to its right neighbour
        stage = OldStage([3, 0, 0, 1])
        skip_self_warmup(stage)
        assert [op.peer for op in stage._get_init_p2p_neighbors_ops()] == [3, 1]
        new = NewStage([3, 0, 0, 1])
        skip_self_warmup(new)
        assert [op.peer for op in new._get_init_p2p_neighbors_ops()] == [3, 0, 0, 1]
    finally:
        dist.destroy_process_group()
