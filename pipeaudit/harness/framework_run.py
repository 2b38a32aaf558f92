"""What a rank of another framework's pipeline (DeepSpeed, Megatron-core) shares with the
others in the harness: where it computes, and how the run ends (imports torch)."""

from __future__ import annotations

import socket
from dataclasses import dataclass

import torch
import torch.distributed as dist

from pipeaudit.harness.config import ProfileConfig
from pipeaudit.harness.faults import faults_from_env
from pipeaudit.harness.manifest import build_manifest, write_manifest
from pipeaudit.harness.status import Reporter


@dataclass(frozen=True)
class Placement:
    """Where a framework rank computes: a GPU of its own over NCCL, else the CPU over gloo."""

    use_cuda: bool
    backend: str
    device: torch.device
    description: str


def start_framework_rank(config: ProfileConfig, rank: int, local_rank: int,
                         local_world_size: int, status_dir: str | None
                         ) -> tuple[Reporter, dict, Placement]:
    """The start every framework rank makes: its status reporter (phase "init"), the faults
    to inject, its intra-op threads and where it computes."""
    rep = Reporter(status_dir, rank)
    rep.phase("init")
    faults = faults_from_env()
    torch.set_num_threads(config.threads)
    return rep, faults, place_framework_rank(config, local_rank, local_world_size)


def place_framework_rank(config: ProfileConfig, local_rank: int, local_world_size: int) -> Placement:
    """A GPU per rank when asked (``--device cuda``) or when there are enough (``auto``)."""
    use_cuda = config.device == "cuda" or (
        config.device == "auto" and config.backend != "gloo"
        and torch.cuda.is_available() and torch.cuda.device_count() >= local_world_size)
    if not use_cuda:
        return Placement(False, "gloo", torch.device("cpu"), "cpu")
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    return Placement(True, "nccl", device, f"cuda ({torch.cuda.get_device_name(device)})")


def finish_framework_run(config: ProfileConfig, rank: int, rep: Reporter, place: Placement,
                         launcher: str, walls: tuple[list[float], list[float]],
                         rank_actions: dict[int, list[str]], framework: dict,
                         p2p_link: list[list[float]] | None = None) -> dict | None:
    """Barrier, rank 0 writes the manifest (with ``framework``: name, version, schedule; and
    the link it timed), tear down; returns the manifest on rank 0."""
    warmup_wall, step_wall = walls
    rep.phase("finish")
    dist.barrier()
    manifest = None
    if rank == 0:
        manifest = build_manifest(
            config, torch_version=torch.__version__, backend=place.backend,
            device=place.description, host=socket.gethostname(), launcher=launcher,
            step_wall_s=step_wall, warmup_step_wall_s=warmup_wall, rank_actions=rank_actions,
            annotation_source="harness" if config.annotate else "none", p2p_link=p2p_link)
        manifest["framework"] = framework
        write_manifest(config.out, manifest)
    dist.barrier()
    dist.destroy_process_group()
    rep.phase("done")
    return manifest
