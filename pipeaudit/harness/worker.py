"""One rank of a harness run: train under torch.profiler, write the trace (imports torch).

Called in a launcher-started process by ``pipeaudit.harness.entry.forked_main``,
or in-process by ``python -m pipeaudit.harness`` under torchrun.
"""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import threading
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, schedule

from pipeaudit.harness.build import build_pipeline, plan_rank_actions
from pipeaudit.harness.catalog import get_spec
from pipeaudit.harness.config import ProfileConfig
from pipeaudit.harness.faults import faults_from_env, maybe_inject
from pipeaudit.harness.manifest import build_manifest, trace_name, write_manifest
from pipeaudit.harness.model import make_batch
from pipeaudit.harness.status import Reporter

PARTIAL_PREFIX = "partial-"
#: Header key of a partial trace: the ProfilerStep number during which the rank stopped
#: (pipeaudit.trace.cut.PARTIAL_KEY; the analysis excludes that step and later ones).
INCOMPLETE_STEP_KEY = "pipeaudit_incomplete_step"
_COMM_MARKERS = ("gloo", "nccl", "connection", "broken pipe", "timed out", "timeout",
                 "peer", "socket", "distbackenderror", "closed")


def resolve_backend(requested: str, local_world_size: int) -> tuple[str, str]:
    """(backend, device type) for ``--backend`` auto|gloo|nccl."""
    n_gpu = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if requested == "gloo":
        return "gloo", "cpu"
    if requested == "nccl" or (requested == "auto" and n_gpu >= local_world_size):
        if n_gpu < local_world_size:
            from pipeaudit.errors import ConfigError

            raise ConfigError(
                f"--backend nccl needs {local_world_size} CUDA devices on this host, found {n_gpu}"
            )
        return "nccl", "cuda"
    return "gloo", "cpu"


class _Run:
    """State of one rank's run (kept small; see run_rank)."""

    def __init__(self, config: ProfileConfig, rank: int, reporter: Reporter) -> None:
        self.config = config
        self.rank = rank
        self.reporter = reporter
        self.step = -1
        self.failed = False
        self.profiled_done = 0  #: profiled steps finished (set before the prof.step() closing one)
        self.trace_written: str | None = None

    def on_trace_ready(self, prof) -> None:
        out = Path(self.config.out)
        name = trace_name(self.rank)
        if self.failed or self.profiled_done < self.config.steps:
            name = PARTIAL_PREFIX + name
        with sigterm_deferred():  # a stop request must not cut the trace being written
            prof.export_chrome_trace(str(out / name))
        self.trace_written = name


class Stopped(BaseException):
    """Raised in a worker by SIGTERM (the launcher stopping a failed or timed-out run, or
    torchrun): the profiled steps unwind, so the trace of the finished steps is written."""


@contextlib.contextmanager
def sigterm_deferred():
    """Ignore SIGTERM inside the block (the launcher SIGKILLs after its grace period)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def stop_on_sigterm(run: "_Run"):
    """SIGTERM raises :class:`Stopped` inside the block (main thread only), unless the rank is
    already unwinding (``run.failed``): the handler of a signal that arrived while gloo blocked
    runs late, and must not interrupt the profiler writing the partial trace."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame) -> None:
        if not run.failed:
            raise Stopped("stopped by SIGTERM (the run failed or timed out elsewhere)")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


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
    rep = Reporter(status_dir, rank)
    run = _Run(config, rank, rep)
    rep.phase("init")
    faults = faults_from_env()
    torch.set_num_threads(config.threads)
    backend, device_type = resolve_backend(config.backend, local_world_size)
    if device_type == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        device_desc = f"cuda ({torch.cuda.get_device_name(device)})"
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
    pipe = build_pipeline(config, rank, device)
    params = [p for m in pipe.modules for p in m.parameters()]
    optimizer = torch.optim.SGD(params, lr=1e-3)
    x, y = make_batch(config, device)
    holds_first = any(st.is_first for st in pipe.stages)
    holds_last = any(st.is_last for st in pipe.stages)

    def train_step(step: int) -> float:
        run.step = step
        maybe_inject(faults, rank, step, note=rep.note)
        t0 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        args = (x,) if holds_first else ()
        kwargs = {"target": y} if holds_last else {}
        pipe.schedule.step(*args, **kwargs)
        optimizer.step()
        if device_type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter() - t0

    warmup_wall: list[float] = []
    for i in range(config.warmup_steps):
        rep.phase("warmup", step=i)
        wall = train_step(i)
        warmup_wall.append(wall)
        rep.step_done(i, False, wall)

    activities = [ProfilerActivity.CPU]
    if device_type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    step_wall: list[float] = []
    with stop_on_sigterm(run), profile(
        activities=activities,
        schedule=schedule(wait=0, warmup=0, active=config.steps, repeat=1),
        on_trace_ready=run.on_trace_ready,
        profile_memory=config.profile_memory,
        record_shapes=config.record_shapes,
    ) as prof:
        try:
            for i in range(config.steps):
                step = config.warmup_steps + i
                rep.phase("profile", step=step)
                # Said *before* the step runs: however the rank stops (exception, SIGTERM),
                # its partial trace names the step that was cut; cleared once all are done.
                prof.add_metadata_json(INCOMPLETE_STEP_KEY, json.dumps(i))
                wall = train_step(step)
                step_wall.append(wall)
                rep.step_done(step, True, wall)
                run.profiled_done = i + 1
                if run.profiled_done == config.steps:
                    prof.add_metadata_json(INCOMPLETE_STEP_KEY, "null")
                prof.step()  # closes ProfilerStep#i; after the last one the trace is exported
        except BaseException:
            run.failed = True
            raise
    if run.trace_written is None:  # pragma: no cover - torch always calls on_trace_ready
        raise RuntimeError("torch.profiler did not export a trace")

    rep.phase("finish")
    dist.barrier()
    manifest = None
    if rank == 0:
        spec = get_spec(config.schedule)
        if spec.torch_annotates:
            source = "torch-runtime"
        else:
            source = "harness" if pipe.harness_annotated else "none"
        manifest = build_manifest(
            config,
            torch_version=torch.__version__,
            backend=backend,
            device=device_desc,
            host=socket.gethostname(),
            launcher=launcher,
            step_wall_s=step_wall,
            warmup_step_wall_s=warmup_wall,
            rank_actions=plan_rank_actions(
                config.schedule, pipe.schedule, config.stages, config.microbatches),
            annotation_source=source,
        )
        write_manifest(config.out, manifest)
    dist.barrier()
    dist.destroy_process_group()
    rep.phase("done")
    return manifest
