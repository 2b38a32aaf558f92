"""Build one rank's pipeline: stage modules, PipelineStages and the schedule (imports torch)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining import schedules as S

from pipeaudit.harness.annotate import annotate_stage
from pipeaudit.harness.catalog import get_spec, rank_stages
from pipeaudit.harness.config import ProfileConfig
from pipeaudit.harness.model import build_stage_module, loss_fn
from pipeaudit.harness.naive import ScheduleNaive


def schedule_class(torch_class: str) -> type:
    """The class named by the catalogue: torch's, or the harness's own ``naive``."""
    return ScheduleNaive if torch_class == "naive" else getattr(S, torch_class)


@dataclass
class Pipeline:
    schedule: object
    stages: list  # PipelineStage, increasing stage index
    modules: list  # StageModule, same order
    harness_annotated: bool  # the harness added its own PP: spans


def build_pipeline(config: ProfileConfig, rank: int, device: torch.device, group=None) -> Pipeline:
    spec = get_spec(config.schedule)
    indices = rank_stages(spec.placement, config.stages, config.num_chunks, rank)
    modules = [build_stage_module(config, s, device) for s in indices]
    stages = [
        PipelineStage(m, s, config.num_stages, device, group=group)
        for m, s in zip(modules, indices)
    ]
    harness_annotated = config.annotate and not spec.torch_annotates
    if harness_annotated:
        for st in stages:
            annotate_stage(st)
    cls = schedule_class(spec.torch_class)
    if spec.multi_stage:
        schedule = cls(stages, config.microbatches, loss_fn=loss_fn)
    else:
        schedule = cls(stages[0], config.microbatches, loss_fn=loss_fn)
    return Pipeline(schedule, stages, modules, harness_annotated)


def single_stage_rank_actions(name: str, num_ranks: int, num_microbatches: int) -> dict[int, list[str]]:
    """Execution order of ``Schedule1F1B`` / ``ScheduleGPipe``, read off their ``_step_microbatches``.

    Not taken from torch's ``_get_pipeline_order``: in torch 2.13 that IR is only
    nominal, and for 1F1B it is wrong on the last rank (it starts with ``F1``).
    1F1B on stage s: ``min(M, P-s)`` forwards, then B/F alternating, then the
    remaining backwards. GPipe: all forwards, then all backwards.
    """
    m = num_microbatches
    out: dict[int, list[str]] = {}
    for s in range(num_ranks):
        acts: list[str] = []
        if name == "gpipe":
            acts = [f"{s}F{i}" for i in range(m)] + [f"{s}B{i}" for i in range(m)]
        else:
            fwd = bwd = 0
            for _ in range(min(m, num_ranks - s)):
                acts.append(f"{s}F{fwd}")
                fwd += 1
            while True:
                acts.append(f"{s}B{bwd}")
                bwd += 1
                if fwd == m:
                    break
                acts.append(f"{s}F{fwd}")
                fwd += 1
            while bwd < m:
                acts.append(f"{s}B{bwd}")
                bwd += 1
        out[s] = acts
    return out


def plan_rank_actions(name: str, schedule, num_ranks: int, num_microbatches: int) -> dict[int, list[str]]:
    """Each rank's compute actions in execution order, in torch's notation.

    ``F``/``B``/``I``/``W`` actions as ``2F0``; DualPipeV's overlapped pairs as
    ``(0F3;3B1)OVERLAP_F_B``. Idle slots and REDUCE_GRAD are dropped. For the
    runtime schedules this is exactly the list torch executes (its
    ``pipeline_order``).
    """
    if name in ("1f1b", "gpipe"):
        return single_stage_rank_actions(name, num_ranks, num_microbatches)
    order = getattr(schedule, "pipeline_order", None) or {}
    out: dict[int, list[str]] = {}
    for r in range(num_ranks):
        acts = order.get(r, [])
        out[r] = [
            str(a) for a in acts
            if a is not None and a.computation_type != S._ComputationType.REDUCE_GRAD
        ]
    return out
