"""``--single-process``: one process runs every stage, the classic teaching setup (imports torch).

The model's P stages go to ``cuda:0 .. cuda:P-1`` (``--backend auto`` with at least P GPUs, or
``nccl``), to ``cuda:(s mod GPUs)`` with ``--device cuda`` (every stage on one GPU when there is
one), else all to the CPU. A hand-written loop runs the schedule's actions (``naive``,
``gpipe`` or ``1f1b``) in the issue order of ``pipeaudit.harness.plans.single_process_order``:
no process group (torch.distributed.pipelining needs one), activations and gradients cross
stages with ``.to(device)`` (between GPUs a device-to-device memcpy; on the CPU no copy at all).

Each action runs inside ``record_function("PP:<stage><F|B><mb>")`` (unless ``--no-annotate``),
holding only the stage's compute (the copy of its input happens just before the span); the last
stage's loss is inside its ``F`` span. On GPUs the host only launches the kernels, so the stages'
devices compute at the same time; stages that share a device (all of them on the CPU, several
on one GPU) take turns on it, so the trace shows the schedule's order but no overlap between
them.
"""

from __future__ import annotations

import contextlib
import socket
import time
from pathlib import Path

import torch
from torch.profiler import record_function

from pipeaudit.errors import ConfigError
from pipeaudit.harness.config import ProfileConfig
from pipeaudit.harness.faults import faults_from_env, maybe_inject
from pipeaudit.harness.manifest import build_manifest, write_manifest
from pipeaudit.harness.model import build_stage_module, loss_fn, make_batch
from pipeaudit.harness.plans import parse_action, single_process_order
from pipeaudit.harness.profiling import run_steps
from pipeaudit.harness.status import Reporter


def stage_devices(config: ProfileConfig) -> list[torch.device]:
    """The device of each stage: ``cuda:(s mod GPUs)`` for stage s on GPUs, else the CPU.

    ``--device cuda`` (or ``--backend nccl``) puts the stages on the GPUs there are, several
    stages to a GPU when there are fewer GPUs than stages; ``auto`` does so only with a GPU
    per stage.
    """
    p = config.stages
    n_gpu = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if config.device == "cpu":
        return [torch.device("cpu")] * p
    if config.backend == "nccl" and n_gpu < p:
        raise ConfigError(f"--single-process --backend nccl needs {p} CUDA devices, found {n_gpu}")
    if config.device == "cuda" and n_gpu == 0:
        raise ConfigError("--device cuda: torch sees no CUDA device here")
    if config.device == "cuda" or config.backend == "nccl" or (config.backend == "auto"
                                                                and n_gpu >= p):
        return [torch.device("cuda", s % n_gpu) for s in range(p)]
    return [torch.device("cpu")] * p


class HandWrittenPipeline:
    """P stage modules on their devices and one training step over M microbatches."""

    def __init__(self, config: ProfileConfig, devices: list[torch.device]) -> None:
        self.config = config
        self.devices = devices
        self.modules = [build_stage_module(config, s, d) for s, d in enumerate(devices)]
        self.order = [parse_action(a) for a in
                      single_process_order(config.schedule, config.stages, config.microbatches)]

    def _span(self, stage: int, kind: str, mb: int):
        if not self.config.annotate:
            return contextlib.nullcontext()
        return record_function(f"PP:{stage}{kind}{mb}")

    def step(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """Forward and backward of every microbatch, in the schedule's issue order."""
        m = self.config.microbatches
        last = len(self.modules) - 1
        xs, ys = x.chunk(m), y.chunk(m)
        inputs: dict[tuple[int, int], torch.Tensor] = {}
        outputs: dict[tuple[int, int], torch.Tensor] = {}
        grads: dict[tuple[int, int], torch.Tensor] = {}  # gradient of stage s's input, mb
        for s, kind, mb in self.order:
            dev = self.devices[s]
            if kind == "F":
                if s == 0:
                    inp = xs[mb]
                else:
                    inp = outputs[(s - 1, mb)].detach().to(dev).requires_grad_()
                    inputs[(s, mb)] = inp
                with self._span(s, kind, mb):
                    out = self.modules[s](inp)
                    if s == last:  # mean over microbatches, as pipelining's grad scaling
                        out = loss_fn(out, ys[mb]) / m
                outputs[(s, mb)] = out
            else:
                out = outputs.pop((s, mb))
                grad = None if s == last else grads.pop((s + 1, mb)).to(dev)
                with self._span(s, kind, mb):
                    torch.autograd.backward(out, grad_tensors=grad)
                if s > 0:
                    grads[(s, mb)] = inputs.pop((s, mb)).grad


def run_single(config: ProfileConfig, launcher: str, status_dir: str | None) -> dict:
    """Run the whole pipeline in this process; write ``rank0.json.gz`` and the manifest."""
    rep = Reporter(status_dir, 0)
    rep.phase("init")
    faults = faults_from_env()
    torch.set_num_threads(config.threads)
    devices = stage_devices(config)
    use_cuda = devices[0].type == "cuda"
    Path(config.out).mkdir(parents=True, exist_ok=True)  # under torchrun no launcher made it
    rep.phase("build")
    pipe = HandWrittenPipeline(config, devices)
    params = [p for mod in pipe.modules for p in mod.parameters()]
    optimizer = torch.optim.SGD(params, lr=1e-3)
    x, y = make_batch(config, devices[0])
    y = y.to(devices[-1])

    def sync() -> None:
        if use_cuda:
            for d in devices:
                torch.cuda.synchronize(d)

    def train_step(step: int) -> float:
        maybe_inject(faults, 0, step, note=rep.note)
        t0 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        pipe.step(x, y)
        optimizer.step()
        sync()
        return time.perf_counter() - t0

    warmup_wall, step_wall = run_steps(config, 0, rep, train_step, use_cuda)
    rep.phase("finish")
    if use_cuda:
        distinct = sorted(set(devices), key=lambda d: d.index)
        names = sorted({torch.cuda.get_device_name(d) for d in distinct})
        device_desc = f"cuda x {len(distinct)} ({', '.join(names)})"
    else:
        device_desc = "cpu"
    manifest = build_manifest(
        config,
        torch_version=torch.__version__,
        backend="none",
        device=device_desc,
        host=socket.gethostname(),
        launcher=launcher,
        step_wall_s=step_wall,
        warmup_step_wall_s=warmup_wall,
        rank_actions={0: [f"{s}{k}{mb}" for s, k, mb in pipe.order]},
        annotation_source="harness" if config.annotate else "none",
        stage_devices=[str(d) for d in devices],
        stages_concurrent=use_cuda and len(set(devices)) == len(devices),
    )
    write_manifest(config.out, manifest)
    rep.phase("done")
    return manifest
