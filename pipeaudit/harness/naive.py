"""The ``naive`` schedule (not in torch): one microbatch at a time, no overlap.

Every rank runs ``F0 B0 F1 B1 ...`` on its single stage. Because the first stage
cannot start F(m+1) before its B(m) is done, and B(m) needs every later stage's
B(m), exactly one microbatch is in the pipeline at any time: the bubble is
(P-1)/P whatever M. It is a real schedule on torch's ``_PipelineScheduleRuntime``
(torch lowers the compute list to SEND/RECV actions and runs them with P2P ops),
so its traces carry the same ``PP:<stage><kind><mb>`` spans as torch's runtime
schedules.
"""

from __future__ import annotations

from torch.distributed.pipelining.schedules import (
    _Action,
    _ComputationType,
    _PipelineScheduleRuntime,
)


def naive_rank_actions(num_ranks: int, rank: int, num_microbatches: int) -> list[_Action]:
    """Compute actions of ``rank`` (which holds stage ``rank``)."""
    out: list[_Action] = []
    for mb in range(num_microbatches):
        out.append(_Action(rank, _ComputationType.FORWARD, mb))
        out.append(_Action(rank, _ComputationType.FULL_BACKWARD, mb))
    return out


class ScheduleNaive(_PipelineScheduleRuntime):
    """Naive pipeline: microbatches strictly one after another (one stage per rank)."""

    def __init__(self, stages, n_microbatches: int, loss_fn=None, scale_grads: bool = True):
        super().__init__(
            stages=stages, n_microbatches=n_microbatches, loss_fn=loss_fn, scale_grads=scale_grads
        )
        if len(stages) != 1:
            raise ValueError(f"naive runs one stage per rank, got {len(stages)}")
        self.pipeline_order = {
            r: list(naive_rank_actions(self.pp_group_size, r, n_microbatches))
            for r in range(self.pp_group_size)
        }
        self._prepare_schedule_with_comms(self.pipeline_order)
