"""One rank of a DeepSpeed PipelineEngine run under torch.profiler (imports torch and deepspeed).

``pipeaudit profile --framework deepspeed`` trains the harness's model (the same blocks, the same
``--imbalance``) as a ``deepspeed.pipe.PipelineModule`` with ``engine.train_batch()``: DeepSpeed's
own ``TrainSchedule`` (1F1B's order), its own blocking point-to-point and its own gradient
all-reduce, loss broadcast and gradient-norm collectives. M is ``gradient_accumulation_steps``.
On CPU it runs with ``DS_ACCELERATOR=cpu`` over gloo (no source patch); with one GPU per rank,
over NCCL.

DeepSpeed writes no ``record_function`` of its own. With ``--annotate`` (the default) the harness
wraps the engine's ``ForwardPass`` and ``BackwardPass`` instructions in ``PP:<stage>F<mb>`` /
``PP:<stage>B<mb>`` spans on this engine only (an instance-level copy of its instruction map;
nothing global is patched), so a test can read one real run with and without its annotations.
DeepSpeed's grid puts the pipe dimension outermost by default: rank ``s * D + d`` is stage ``s``
of replica ``d``, as the harness's own layout (:mod:`pipeaudit.harness.layout` with T = 1);
``--grid dp-outer`` builds ``ProcessTopology(axes=["data", "pipe"])`` instead (rank ``d * P + s``).
``--activation-checkpointing`` is DeepSpeed's own ``activation_checkpoint_interval=1``;
``--tied-embedding`` adds a projection tied between the first and the last stage
(``TiedLayerSpec``: the last stage applies its transpose), whose gradients DeepSpeed all-reduces
between the two stages after every step.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch
from torch.profiler import record_function

from pipeaudit.harness.config import ProfileConfig
from pipeaudit.harness.faults import maybe_inject
from pipeaudit.harness.framework_run import finish_framework_run, start_framework_rank
from pipeaudit.harness.link_probe import time_link
from pipeaudit.harness.model import StageModule, loss_fn, make_batch
from pipeaudit.harness.plans import single_stage_rank_actions
from pipeaudit.harness.profiling import run_steps


class RepeatedBlock(StageModule):
    """One layer of the harness model as DeepSpeed builds it (only on its stage, seeded by the
    layer): the :class:`~pipeaudit.harness.model.StageModule` of ``copies`` blocks with their
    own weights (a heavier stage, ``--imbalance``), each applied ``repeat`` times (a slower
    rank, ``--slow-rank``)."""

    def __init__(self, stage: int, hidden: int, ffn_mult: int, copies: int, repeat: int,
                 seed: int) -> None:
        gen_state = torch.random.get_rng_state()
        torch.manual_seed(seed)
        try:
            super().__init__(stage, copies, hidden, ffn_mult, repeat)
        finally:
            torch.random.set_rng_state(gen_state)


class TiedProjection(torch.nn.Linear):
    """The tied layer: ``hidden -> hidden``, applied as is on the first stage."""

    def __init__(self, hidden: int, seed: int) -> None:
        gen_state = torch.random.get_rng_state()
        torch.manual_seed(seed)
        try:
            super().__init__(hidden, hidden, bias=False)
        finally:
            torch.random.set_rng_state(gen_state)


def tied_head(module: TiedProjection, x: torch.Tensor) -> torch.Tensor:
    """The tied layer as the last stage applies it: its transpose (an LM head's use of the
    embedding)."""
    return torch.nn.functional.linear(x, module.weight.t())


#: DeepSpeed's partition_method: blocks counted by class name (each weighs 1), so tied layers
#: (weight 0) ride along with the first and the last stage
PARTITION_METHOD = "type:RepeatedBlock"


def layer_specs(config: ProfileConfig, rank: int) -> tuple[list, str]:
    """The model as DeepSpeed LayerSpecs, each layer ``--imbalance`` blocks of its stage (times
    its ``--heavy-layer`` factor), and the ``partition_method`` that cuts them as the run's
    ``stage_layers``.

    DeepSpeed 0.19's ``partition_method`` takes ``uniform``, ``parameters`` or ``type:REGEX``,
    no explicit parts. :data:`PARTITION_METHOD` balances the blocks by count: where that gives
    the run's ``stage_layers``, one spec per layer; otherwise (``--stage-layers``) each stage's
    layers are one spec, and the P specs are one per stage. The factors follow the stage each
    layer lands on, so ``--imbalance 1=3`` makes DeepSpeed's stage 1 3x heavier. With
    ``--tied-embedding`` a :class:`TiedProjection` opens the first stage and closes the last.
    """
    from deepspeed.pipe import LayerSpec, TiedLayerSpec
    from deepspeed.runtime.utils import partition_balanced

    n, tied = config.model.layers, config.model.tied_embedding
    layers = config.stage_layers
    bounds = [sum(layers[:s]) for s in range(config.stages + 1)]
    # the bounds DeepSpeed computes for PARTITION_METHOD over one spec per layer
    balanced = partition_balanced(weights=[0] * tied + [1] * n + [0] * tied,
                                  num_parts=config.stages)
    grouped = [min(max(b - tied, 0), n) for b in balanced] != bounds
    specs = []
    for stage in range(config.stages):
        blocks = config.layer_blocks(stage)
        if grouped:
            specs.append(LayerSpec(RepeatedBlock, stage, config.model.hidden,
                                   config.model.ffn_mult, sum(blocks),
                                   config.slow_ranks.get(rank, 1),
                                   config.seed * 100_003 + bounds[stage]))
            continue
        for i, layer in enumerate(range(bounds[stage], bounds[stage + 1])):
            specs.append(LayerSpec(RepeatedBlock, stage, config.model.hidden,
                                   config.model.ffn_mult, blocks[i],
                                   config.slow_ranks.get(rank, 1),
                                   config.seed * 100_003 + layer))
    if tied:
        seed = config.seed * 100_003 + n
        specs = ([TiedLayerSpec("tied", TiedProjection, config.model.hidden, seed)] + specs
                 + [TiedLayerSpec("tied", TiedProjection, config.model.hidden, seed,
                                  forward_fn=tied_head)])
    return specs, PARTITION_METHOD


def topology(config: ProfileConfig):
    """DeepSpeed's process grid: pipe outermost (its default) or data outermost (``--grid``)."""
    from deepspeed.runtime.pipe.topology import PipeDataParallelTopology, ProcessTopology

    if config.grid == "dp-outer":
        return ProcessTopology(axes=["data", "pipe"], dims=[config.dp, config.stages])
    return PipeDataParallelTopology(num_pp=config.stages, num_dp=config.dp)


def ds_config(config: ProfileConfig) -> dict:
    """DeepSpeed's config: M = gradient_accumulation_steps, fp32, no ZeRO, quiet."""
    micro = config.batch_size // config.microbatches
    return {
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": config.microbatches,
        "train_batch_size": micro * config.microbatches * config.dp,
        "steps_per_print": 1 << 30,
        "zero_optimization": {"stage": 0},
        "wall_clock_breakdown": False,
    }


def annotate_engine(engine, stage: int) -> list[int]:
    """``PP:`` spans around this engine's forward and backward actions; returns the counters
    (forwards, backwards in this step) that the caller resets before every step.

    As torch's runtime spans do, an action's span holds the delivery of its input: an F span
    opens at the first ``LoadMicroBatch`` or ``RecvActivation`` after the previous forward
    (the received buffer's copy is the action's work, its wait no compute) and closes when
    ``ForwardPass`` returns; a B span opens at ``RecvGrad`` (or at ``BackwardPass`` on the
    last stage) and closes when ``BackwardPass`` returns. A ``SendActivation`` that DeepSpeed
    orders between (odd stages receive before they send) is communication inside the span."""
    from deepspeed.runtime.pipe import schedule as ds_schedule

    counts = [0, 0]
    open_spans: list = [None, None]
    table = dict(engine._INSTRUCTION_MAP)

    def opener(fn, slot: int, kind: str):
        def run(self, *args, **kwargs):
            if open_spans[slot] is None:
                span = record_function(f"PP:{stage}{kind}{counts[slot]}")
                span.__enter__()
                open_spans[slot] = span
            return fn(self, *args, **kwargs)
        return run

    def closer(fn, slot: int, kind: str):
        run_open = opener(fn, slot, kind)

        def run(self, *args, **kwargs):
            out = run_open(self, *args, **kwargs)
            open_spans[slot].__exit__(None, None, None)
            open_spans[slot] = None
            counts[slot] += 1
            return out
        return run

    for instr in (ds_schedule.LoadMicroBatch, ds_schedule.RecvActivation):
        table[instr] = opener(table[instr], 0, "F")
    table[ds_schedule.RecvGrad] = opener(table[ds_schedule.RecvGrad], 1, "B")
    table[ds_schedule.ForwardPass] = closer(table[ds_schedule.ForwardPass], 0, "F")
    table[ds_schedule.BackwardPass] = closer(table[ds_schedule.BackwardPass], 1, "B")
    engine._INSTRUCTION_MAP = table  # the engine looks it up through self: this engine only
    return counts


def run_deepspeed_rank(config: ProfileConfig, rank: int, world_size: int, local_rank: int,
                       local_world_size: int, launcher: str, status_dir: str | None = None) -> dict | None:
    """Run one DeepSpeed rank to completion; rank 0 writes and returns the manifest."""
    rep, faults, place = start_framework_rank(config, rank, local_rank, local_world_size,
                                              status_dir)
    if not place.use_cuda:
        os.environ["DS_ACCELERATOR"] = "cpu"
    import deepspeed
    from deepspeed.pipe import PipelineModule

    device = place.device
    Path(config.out).mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("LOCAL_RANK", str(local_rank))
    deepspeed.init_distributed(dist_backend=place.backend, auto_mpi_discovery=False,
                               timeout=_timeout(config))
    rep.phase("build")
    specs, partition_method = layer_specs(config, rank)
    model = PipelineModule(layers=specs, topology=topology(config), loss_fn=loss_fn,
                           partition_method=partition_method,
                           activation_checkpoint_interval=(
                               1 if config.model.activation_checkpointing else 0))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer,
                                           config=ds_config(config))
    stage, replica = engine.stage_id, engine.grid.data_parallel_id
    expected = config.layout.coords(rank)
    if (stage, replica) != (expected["pp"], expected["dp"]):  # pragma: no cover - DeepSpeed changed
        raise RuntimeError(f"rank {rank}: DeepSpeed puts it at stage {stage}, replica {replica}; "
                           f"expected {expected['pp']}, {expected['dp']}")
    counts = annotate_engine(engine, stage) if config.annotate else None
    x, y = make_batch(config, device, replica=replica)
    xs, ys = x.chunk(config.microbatches), y.chunk(config.microbatches)

    def train_step(step: int) -> float:
        maybe_inject(faults, rank, step, note=rep.note)
        if counts is not None:
            counts[0] = counts[1] = 0
        t0 = time.perf_counter()
        engine.train_batch(iter(list(zip(xs, ys))))
        if place.use_cuda:
            torch.cuda.synchronize(device)
        return time.perf_counter() - t0

    link = time_link(config, rank, device)
    walls = run_steps(config, rank, rep, train_step, place.use_cuda)
    plan = single_stage_rank_actions("1f1b", config.stages, config.microbatches)
    return finish_framework_run(
        config, rank, rep, place, launcher, walls,
        {r: plan[config.layout.coords(r)["pp"]] for r in range(config.world_size)},
        {"name": "deepspeed", "version": deepspeed.__version__, "schedule": "TrainSchedule"},
        p2p_link=link)


def _timeout(config: ProfileConfig):
    from datetime import timedelta

    return timedelta(seconds=config.timeout)
