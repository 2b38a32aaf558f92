"""Build one rank's pipeline: stage modules, PipelineStages and the schedule (imports torch)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining import schedules as S

from pipeaudit.harness.annotate import annotate_stage
from pipeaudit.harness.catalog import get_spec, rank_stages
from pipeaudit.harness.config import ProfileConfig
from pipeaudit.harness.mesh import RankPlace
from pipeaudit.harness.model import build_stage_module, loss_fn
from pipeaudit.harness.naive import ScheduleNaive
from pipeaudit.harness.parallel import apply_data_parallel, apply_tensor_parallel
from pipeaudit.harness.plans import single_stage_rank_actions
from pipeaudit.harness.v_warmup import skip_self_warmup

__all__ = ["Pipeline", "build_pipeline", "plan_rank_actions", "single_stage_rank_actions"]


def schedule_class(torch_class: str) -> type:
    """The class named by the catalogue: torch's, or the harness's own ``naive``."""
    return ScheduleNaive if torch_class == "naive" else getattr(S, torch_class)


@dataclass
class Pipeline:
    schedule: object
    stages: list  # PipelineStage, increasing stage index
    modules: list  # StageModule (wrapped for data parallelism if any), same order
    harness_annotated: bool  # the harness added its own PP: spans


class HostBoundary(torch.nn.Module):
    """A stage computing on ``device`` inside a pipeline whose tensors live in host memory: its
    input goes to the device, its output comes back (autograd carries the gradients the same
    way). Several ranks can so share one GPU with their P2P over gloo."""

    def __init__(self, inner: torch.nn.Module, device: torch.device) -> None:
        super().__init__()
        self.inner = inner
        self.device = device

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x.to(self.device, non_blocking=True)).to("cpu")


def build_pipeline(config: ProfileConfig, rank: int, device: torch.device, group=None,
                   place: RankPlace | None = None,
                   compute_device: torch.device | None = None) -> Pipeline:
    """This rank's stages, wrapped for tensor/data parallelism when ``place`` says so.

    ``place`` (from ``pipeaudit.harness.mesh.place_rank``) gives the rank's pipeline position
    and its pp group; without it the rank is its own pipeline position in ``group`` (None:
    the world group). ``compute_device``: the stages compute there while their tensors and P2P
    stay on ``device`` (the host), through :class:`HostBoundary`.
    """
    spec = get_spec(config.schedule)
    pp_rank = place.pp_rank if place is not None else rank
    if place is not None:
        group = place.pp_group
    indices = rank_stages(spec.placement, config.stages, config.num_chunks, pp_rank)
    modules = []
    for s in indices:
        module = build_stage_module(config, s, compute_device or device, rank)
        if compute_device is not None:
            module = HostBoundary(module, compute_device)
        if place is not None and place.tp_mesh is not None:
            apply_tensor_parallel(module, place.tp_mesh)
        if place is not None and place.dp_mesh is not None:
            module = apply_data_parallel(module, place.dp_mesh, config.dp_mode, device)
        modules.append(module)
    stages = [
        PipelineStage(m, s, config.num_stages, device, group=group)
        for m, s in zip(modules, indices)
    ]
    if spec.placement == "v":
        for st in stages:
            skip_self_warmup(st)
    cls = schedule_class(spec.torch_class)
    if spec.multi_stage:
        schedule = cls(stages, config.microbatches, loss_fn=loss_fn)
    else:
        schedule = cls(stages[0], config.microbatches, loss_fn=loss_fn)
    harness_annotated = config.annotate and not spec.torch_annotates
    if harness_annotated:
        for st in stages:
            annotate_stage(st, schedule)
    return Pipeline(schedule, stages, modules, harness_annotated)


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
