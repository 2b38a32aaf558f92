"""One rank of a Megatron-core pipeline run under torch.profiler (imports torch and megatron.core).

``pipeaudit profile --framework megatron`` trains the harness's model with Megatron-core's own
schedules, ``get_forward_backward_func()``: 1F1B without interleaving (``--schedule 1f1b``) or
interleaved 1F1B with virtual stages (``--schedule interleaved-1f1b --chunks V``; chunk c of rank
r is global stage c*P + r). Its P2P goes through ``torch.distributed`` isend/irecv, one by one
(gloo cannot batch them; ``batch_p2p_comm`` off).

Megatron-core 0.16 does not run on a CPU as shipped: three ``total_num_tokens`` in
``pipeline_parallel/schedules.py`` are allocated with ``device="cuda"``, and
``pipeline_parallel/p2p_communication.py`` allocates two receive buffers on
``torch.cuda.current_device()`` and calls ``torch.cuda.synchronize()``. On a CPU the harness
redirects exactly those at run time, nothing else and without editing Megatron's files
(:func:`cuda_calls_on_host`): a ``TorchFunctionMode`` that turns ``device="cuda"`` into the CPU,
``torch.cuda.current_device()`` answering "cpu" and ``torch.cuda.synchronize()`` doing nothing.
On GPUs (one per rank, NCCL) it runs as shipped.

Megatron writes only NVTX ranges, which Kineto does not record. With ``--annotate`` (default)
the harness adds ``PP:<stage>F<mb>`` / ``PP:<stage>B<mb>`` spans by wrapping the two functions the
schedules call for every action, ``schedules.forward_step`` and ``schedules.backward_step`` (the
two lines a Megatron user adds: :func:`annotate_schedules`); a backward is named after the
forward whose output it consumes.
"""

from __future__ import annotations

import contextlib
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch.overrides import TorchFunctionMode
from torch.profiler import record_function

from pipeaudit.harness.catalog import stage_to_rank
from pipeaudit.harness.config import ProfileConfig
from pipeaudit.harness.faults import maybe_inject
from pipeaudit.harness.framework_run import finish_framework_run, start_framework_rank
from pipeaudit.schedules.split_terms import megatron_layout
from pipeaudit.harness.model import StageModule, build_stage_module, make_batch
from pipeaudit.harness.link_probe import time_link
from pipeaudit.harness.profiling import run_steps
from pipeaudit.schedules import build_schedule


class _CudaToHost(TorchFunctionMode):
    """Torch calls given ``device="cuda"`` run on the CPU instead."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        device = kwargs.get("device")
        if device is not None and str(device).startswith("cuda"):
            kwargs = {**kwargs, "device": "cpu"}
        return func(*args, **kwargs)


@contextlib.contextmanager
def cuda_calls_on_host():
    """Megatron-core's six CUDA-only lines run on the CPU inside this block (see the module doc)."""
    saved = torch.cuda.current_device, torch.cuda.synchronize
    torch.cuda.current_device = lambda: "cpu"  # type: ignore[assignment]
    torch.cuda.synchronize = lambda *a, **k: None  # type: ignore[assignment]
    try:
        with _CudaToHost():
            yield
    finally:
        torch.cuda.current_device, torch.cuda.synchronize = saved


class MegatronChunk(torch.nn.Module):
    """One model chunk as Megatron's schedules expect it: ``set_input_tensor`` and ``config``."""

    def __init__(self, stage: StageModule, config, first: bool) -> None:
        super().__init__()
        self.stage = stage
        self.config = config
        self.first = first
        self.input_tensor: torch.Tensor | None = None
        from megatron.core.enums import ModelType

        self.model_type = ModelType.encoder_or_decoder

    def set_input_tensor(self, tensor) -> None:
        self.input_tensor = tensor[0] if isinstance(tensor, list) else tensor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.stage(x if self.first else self.input_tensor)


def annotate_schedules(rank_chunks: list[int]) -> None:
    """Wrap Megatron's ``forward_step`` and ``backward_step`` in ``PP:`` spans, microbatches
    counted from 0 in every call of the schedule. ``rank_chunks``: the global stage of each of
    this rank's model chunks. Call it before ``get_forward_backward_func()``."""
    from megatron.core.pipeline_parallel import schedules

    counts = [0] * len(rank_chunks)
    produced: dict[int, str] = {}
    forward_step, backward_step = schedules.forward_step, schedules.backward_step

    def annotated_forward(*args, **kwargs):
        chunk = kwargs.get("vp_stage") or 0
        stage, mb = rank_chunks[chunk], counts[chunk]
        counts[chunk] += 1
        with record_function(f"PP:{stage}F{mb}"):
            out = forward_step(*args, **kwargs)
        output = out[0][0] if isinstance(out[0], list) else out[0]
        produced[id(output)] = f"PP:{stage}B{mb}"
        return out

    def annotated_backward(input_tensor, output_tensor, *args, **kwargs):
        output = output_tensor[0] if isinstance(output_tensor, list) else output_tensor
        with record_function(produced.pop(id(output), "PP:backward")):
            return backward_step(input_tensor, output_tensor, *args, **kwargs)

    def counted_afresh(schedule):
        def run(*args, **kwargs):
            counts[:] = [0] * len(counts)
            produced.clear()
            return schedule(*args, **kwargs)
        return run

    schedules.forward_step = annotated_forward
    schedules.backward_step = annotated_backward
    for name in ("forward_backward_pipelining_with_interleaving",
                 "forward_backward_pipelining_without_interleaving"):
        setattr(schedules, name, counted_afresh(getattr(schedules, name)))


def run_megatron_rank(config: ProfileConfig, rank: int, world_size: int, local_rank: int,
                      local_world_size: int, launcher: str, status_dir: str | None = None) -> dict | None:
    """Run one Megatron-core rank to completion; rank 0 writes and returns the manifest."""
    rep, faults, place = start_framework_rank(config, rank, local_rank, local_world_size,
                                              status_dir)
    use_cuda, device = place.use_cuda, place.device
    Path(config.out).mkdir(parents=True, exist_ok=True)
    dist.init_process_group(place.backend, rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=config.timeout))
    from megatron.core import parallel_state
    from megatron.core.transformer import TransformerConfig
    from megatron.core.pipeline_parallel import get_forward_backward_func

    v = config.num_chunks
    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=1, pipeline_model_parallel_size=config.stages,
        virtual_pipeline_model_parallel_size=v if v > 1 else None)
    rep.phase("build")
    # the schedules read a TransformerConfig's fields; an uneven split is given to it as
    # Megatron-core's own pipeline_model_parallel_layout (checked by its parser), the harness
    # building each stage's blocks itself
    layout = megatron_layout(config.stage_layers) if config.split is not None else None
    mp_config = TransformerConfig(
        num_layers=config.model.layers if layout else config.num_stages,
        hidden_size=config.model.hidden, num_attention_heads=1,
        pipeline_model_parallel_size=config.stages,
        virtual_pipeline_model_parallel_size=v if v > 1 and not layout else None,
        pipeline_model_parallel_layout=layout,
        pipeline_dtype=torch.float32, batch_p2p_comm=False, deallocate_pipeline_outputs=False)
    placement = stage_to_rank("loop", config.stages, v)
    chunks = [s for s in range(config.num_stages) if placement[s] == rank]
    modules = [MegatronChunk(build_stage_module(config, s, device, rank),
                             mp_config, first=(s == 0)) for s in chunks]
    params = [p for m in modules for p in m.parameters()]
    optimizer = torch.optim.SGD(params, lr=1e-3)
    x, y = make_batch(config, device)
    micro = config.batch_size // config.microbatches
    xs = [t.transpose(0, 1).contiguous() for t in x.split(micro)]  # Megatron: (seq, batch, hidden)
    ys = [t.transpose(0, 1).contiguous() for t in y.split(micro)]
    if config.annotate:
        annotate_schedules(chunks)
    forward_backward = get_forward_backward_func()

    def forward_step_func(data_iterator, model):
        inputs, target = next(data_iterator)
        out = model(inputs)

        def loss_func(output):
            loss = torch.nn.functional.mse_loss(output, target)
            return loss, {"loss": loss.detach()}
        return out, loss_func

    def train_step(step: int) -> float:
        maybe_inject(faults, rank, step, note=rep.note)
        t0 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        batches = [iter(list(zip(xs, ys))) for _ in modules]
        with (contextlib.nullcontext() if use_cuda else cuda_calls_on_host()):
            forward_backward(
                forward_step_func=forward_step_func,
                data_iterator=batches if v > 1 else batches[0],
                model=modules if v > 1 else modules[0],
                num_microbatches=config.microbatches, seq_length=config.model.seq_len,
                micro_batch_size=micro, forward_only=False)
        optimizer.step()
        if use_cuda:
            torch.cuda.synchronize(device)
        return time.perf_counter() - t0

    link = time_link(config, rank, device)
    walls = run_steps(config, rank, rep, train_step, use_cuda)
    import megatron.core as mcore

    sched = build_schedule(config.schedule, config.stages, config.microbatches, v if v > 1 else None)
    return finish_framework_run(
        config, rank, rep, place, launcher, walls,
        {r: [f"{a.stage}{a.kind}{a.microbatch}" for a in sched.orders[r]] for r in range(config.stages)},
        {"name": "megatron-core", "version": mcore.__version__,
         "schedule": "forward_backward_pipelining_"
         + ("with_interleaving" if v > 1 else "without_interleaving")},
        p2p_link=link)

