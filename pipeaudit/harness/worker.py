"""One rank of a harness run: train under torch.profiler, write the trace (imports torch).

Called in a launcher-started process by ``pipeaudit.harness.entry.forked_main``,
or in-process by ``python -m pipeaudit.harness`` under torchrun. With ``single_process``
the one process runs every stage (``pipeaudit.harness.single``).
"""

from __future__ import annotations

import socket
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from pipeaudit.harness.build import build_pipeline, plan_rank_actions
from pipeaudit.harness.catalog import get_spec
from pipeaudit.harness.config import ProfileConfig
from pipeaudit.harness.faults import faults_from_env, maybe_inject
from pipeaudit.harness.manifest import build_manifest, write_manifest
from pipeaudit.harness.link_probe import time_link
from pipeaudit.harness.mesh import place_rank
from pipeaudit.harness.model import make_batch
from pipeaudit.harness.profiling import INCOMPLETE_STEP_KEY, PARTIAL_PREFIX, run_steps
from pipeaudit.harness.status import Reporter

__all__ = ["INCOMPLETE_STEP_KEY", "PARTIAL_PREFIX", "resolve_backend", "run_rank"]

#: The device type of ranks whose stages compute on a GPU shared by several ranks and hand
#: their tensors over gloo through host memory (NCCL refuses two ranks on one GPU, gloo
#: cannot send CUDA tensors).
HOST_P2P = "cuda-via-host"


def resolve_backend(requested: str, local_world_size: int, device: str = "auto") -> tuple[str, str]:
    """(backend, device type) for ``--backend`` auto|gloo|nccl and ``--device`` auto|cpu|cuda.

    A rank computes on the GPU only over nccl, one GPU per rank: NCCL refuses two ranks on
    one GPU ("Duplicate GPU detected") and gloo cannot send CUDA tensors.
    """
    n_gpu = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if requested == "gloo" and device == "cuda":
        return "gloo", HOST_P2P  # compute on the GPU, P2P through host memory
    if requested == "gloo" or device == "cpu":
        return "gloo", "cpu"
    wants_cuda = requested == "nccl" or device == "cuda"
    if wants_cuda or n_gpu >= local_world_size:
        if n_gpu < local_world_size:
            from pipeaudit.errors import ConfigError
            from pipeaudit.harness.config import gpu_shortage

            raise ConfigError(gpu_shortage(local_world_size, n_gpu))
        return "nccl", "cuda"
    return "gloo", "cpu"


def run_rank(
    config: ProfileConfig,
    rank: int,
    world_size: int,
    local_rank: int,
    local_world_size: int,
    launcher: str,
    status_dir: str | None = None,
) -> dict | None:
    """Run one rank to completion; rank 0 writes and returns the manifest."""
    if config.single_process:
        from pipeaudit.harness.single import run_single

        return run_single(config, launcher, status_dir)
    if config.framework == "deepspeed":
        from pipeaudit.harness.deepspeed_worker import run_deepspeed_rank

        return run_deepspeed_rank(config, rank, world_size, local_rank, local_world_size, launcher,
                                  status_dir)
    if config.framework == "megatron":
        from pipeaudit.harness.megatron_worker import run_megatron_rank

        return run_megatron_rank(config, rank, world_size, local_rank, local_world_size, launcher,
                                 status_dir)
    rep = Reporter(status_dir, rank)
    rep.phase("init")
    faults = faults_from_env()
    torch.set_num_threads(config.threads)
    backend, device_type = resolve_backend(config.backend, local_world_size, config.device)
    compute_device = None
    if device_type == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        device_desc = f"cuda ({torch.cuda.get_device_name(device)})"
    elif device_type == HOST_P2P:
        device = torch.device("cpu")  # the P2P buffers and the batch: gloo sends host tensors
        compute_device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(compute_device)
        device_desc = (f"cuda ({torch.cuda.get_device_name(compute_device)}), "
                       f"{torch.cuda.device_count()} GPU(s) shared by {local_world_size} ranks, "
                       "P2P over gloo through host memory")
    else:
        device = torch.device("cpu")
        device_desc = "cpu"
    Path(config.out).mkdir(parents=True, exist_ok=True)

    init_kwargs = {}
    if device_type == "cuda":
        init_kwargs["device_id"] = device
    dist.init_process_group(
        backend, rank=rank, world_size=world_size,
        timeout=timedelta(seconds=config.timeout), **init_kwargs,
    )
    rep.phase("build")
    place = place_rank(config.layout, rank, device_type)
    pipe = build_pipeline(config, rank, device, place=place, compute_device=compute_device)
    params = [p for m in pipe.modules for p in m.parameters()]
    optimizer = torch.optim.SGD(params, lr=1e-3)
    x, y = make_batch(config, device, replica=place.replica)
    on_gpu = device_type == "cuda" or compute_device is not None
    holds_first = any(st.is_first for st in pipe.stages)
    holds_last = any(st.is_last for st in pipe.stages)

    link = time_link(config, rank, device)

    def train_step(step: int) -> float:
        maybe_inject(faults, rank, step, note=rep.note)
        t0 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        args = (x,) if holds_first else ()
        kwargs = {"target": y} if holds_last else {}
        pipe.schedule.step(*args, **kwargs)
        optimizer.step()
        if on_gpu:
            torch.cuda.synchronize(compute_device or device)
        return time.perf_counter() - t0

    warmup_wall, step_wall = run_steps(config, rank, rep, train_step, on_gpu)

    rep.phase("finish")
    dist.barrier()
    manifest = None
    if rank == 0:
        spec = get_spec(config.schedule)
        if spec.torch_annotates:
            source = "torch-runtime"
        else:
            source = "harness" if pipe.harness_annotated else "none"
        plan = plan_rank_actions(config.schedule, pipe.schedule, config.stages, config.microbatches)
        layout = config.layout
        manifest = build_manifest(
            config,
            torch_version=torch.__version__,
            backend=backend,
            device=device_desc,
            host=socket.gethostname(),
            launcher=launcher,
            step_wall_s=step_wall,
            warmup_step_wall_s=warmup_wall,
            rank_actions={r: plan[layout.coords(r)["pp"]] for r in range(config.world_size)},
            annotation_source=source,
            p2p_link=link,
        )
        write_manifest(config.out, manifest)
    dist.barrier()
    dist.destroy_process_group()
    rep.phase("done")
    return manifest
