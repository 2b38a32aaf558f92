"""Click options of ``pipeaudit profile``, shared with ``python -m pipeaudit.harness``.

Imports click (not torch): used only by the two command-line entry points.
Schedule and backend names are checked by ``ProfileConfig.validate`` (one-line
ConfigError), not by click, so every invalid combination reads the same.
"""

from __future__ import annotations

from typing import Any, Callable

import click

from pipeaudit.harness.catalog import SCHEDULE_NAMES
from pipeaudit.harness.config import (
    ModelConfig, ProfileConfig, parse_heavy_layers, parse_imbalance, parse_slow_ranks,
    parse_stage_layers,
)

_OPTIONS = [
    click.option("--schedule", default="1f1b", show_default=True, metavar="NAME",
                 help=f"Pipeline schedule: {', '.join(SCHEDULE_NAMES)}."),
    click.option("--framework", default="torch", show_default=True,
                 metavar="torch|deepspeed|megatron",
                 help="Whose pipeline engine runs it: torch.distributed.pipelining; DeepSpeed's "
                      "PipelineEngine (its TrainSchedule, 1F1B's order; M = "
                      "gradient_accumulation_steps; pip install 'pipeaudit[deepspeed]'); or "
                      "Megatron-core's schedules (1f1b, interleaved-1f1b; pip install "
                      "'pipeaudit[megatron]')."),
    click.option("--ranks", "-P", "stages", type=int, default=None,
                 help="Pipeline ranks P: the stage positions of one pipeline (one process "
                      "each). [default: 2; under torchrun WORLD_SIZE / (dp x tp)]"),
    click.option("--stages", "stages_alias", type=int, default=None, hidden=True,
                 help="Old spelling of --ranks."),
    click.option("--microbatches", "-M", type=int, default=4, show_default=True,
                 help="Microbatches per step M."),
    click.option("--chunks", type=int, default=None,
                 help="Stages per rank v (default: 1, or 2 for multi-chunk schedules)."),
    click.option("--steps", type=int, default=2, show_default=True, help="Profiled steps."),
    click.option("--warmup-steps", type=int, default=1, show_default=True,
                 help="Training steps before the profiler starts."),
    click.option("--out", "-o", required=True, type=click.Path(file_okay=False),
                 help="Output directory: rank{r}.json.gz per rank and manifest.json."),
    click.option("--force", is_flag=True, help="Write into a non-empty --out."),
    click.option("--layers", type=int, default=8, show_default=True, help="Model blocks in total."),
    click.option("--hidden", type=int, default=256, show_default=True, help="Model width."),
    click.option("--ffn-mult", type=int, default=4, show_default=True,
                 help="MLP expansion: fc1 is hidden x ffn-mult*hidden."),
    click.option("--batch-size", type=int, default=None,
                 help="Global batch, split into M microbatches. [default: 4 x M]"),
    click.option("--seq-len", type=int, default=64, show_default=True, help="Sequence length."),
    click.option("--imbalance", multiple=True, metavar="STAGE=FACTOR",
                 help="Make STAGE FACTOR (integer) times heavier by applying each of its "
                      "blocks FACTOR times. Repeatable."),
    click.option("--stage-layers", default=None, metavar="N,N,...",
                 help="Layers of each stage in stage order (P x v counts, each >= 1, summing to "
                      "--layers), e.g. 3,2,2,1. [default: as even as possible]"),
    click.option("--heavy-layer", multiple=True, metavar="LAYER:FACTOR",
                 help="Make LAYER (0-based) FACTOR (integer) times heavier: FACTOR blocks with "
                      "their own weights, on whichever stage holds it. Repeatable."),
    click.option("--dp", type=int, default=1, show_default=True,
                 help="Data-parallel replicas D of the pipeline: P x D x T ranks on a DeviceMesh "
                      "(pp outermost, as torchtitan)."),
    click.option("--tp", type=int, default=1, show_default=True,
                 help="Tensor-parallel ranks T per stage (DTensor on each block's MLP)."),
    click.option("--dp-mode", default="fsdp", show_default=True, metavar="fsdp|ddp",
                 help="Data parallelism on the dp dimension: FSDP2 fully_shard (torchtitan's "
                      "choice) or DDP."),
    click.option("--grid", default="pp-outer", show_default=True, metavar="pp-outer|dp-outer",
                 help="Rank order of the P x D grid: pipeline dimension outermost (torchtitan, "
                      "DeepSpeed's default) or data-parallel outermost (DeepSpeed's "
                      "ProcessTopology(axes=['data', 'pipe'])): a pipeline is then P "
                      "consecutive ranks."),
    click.option("--activation-checkpointing", is_flag=True,
                 help="Recompute each block's forward in the backward (torch.utils.checkpoint; "
                      "DeepSpeed's activation_checkpoint_interval=1)."),
    click.option("--tied-embedding", is_flag=True,
                 help="DeepSpeed: a projection tied between the first and last stage "
                      "(TiedLayerSpec; its gradients are all-reduced between them every step)."),
    click.option("--slow-rank", multiple=True, metavar="RANK=FACTOR",
                 help="Make the stage(s) of one global RANK FACTOR (integer) times heavier, "
                      "e.g. one replica slower than its peers. Repeatable."),
    click.option("--backend", default="auto", show_default=True, metavar="auto|gloo|nccl",
                 help="gloo on CPU; nccl when there are >= P CUDA devices (auto picks)."),
    click.option("--device", default="auto", show_default=True, metavar="auto|cpu|cuda",
                 help="Where the stages compute. cuda: one GPU per rank over nccl; with "
                      "--single-process stage s on cuda:(s mod GPUs), so one GPU can hold every "
                      "stage. auto: cuda when there is a GPU per rank (per stage), else cpu."),
    click.option("--timeout", type=float, default=600.0, show_default=True,
                 help="Seconds for the whole run; a hung run is killed after it."),
    click.option("--no-annotate", is_flag=True,
                 help="Do not add the harness's PP:<stage><kind><mb> spans (1f1b, gpipe); "
                      "torch's own runtime annotations stay."),
    click.option("--no-step-marks", is_flag=True,
                 help="Profile in a plain `with torch.profiler.profile():` (no schedule, no "
                      "prof.step(), so no ProfilerStep#i spans)."),
    click.option("--single-process", is_flag=True,
                 help="One process runs every stage (cuda:0..P-1, or all on the CPU one after "
                      "another) with hand-written naive/gpipe/1f1b loops; no process group."),
    click.option("--profile-memory", is_flag=True, help="torch.profiler profile_memory=True."),
    click.option("--record-shapes", is_flag=True, help="torch.profiler record_shapes=True."),
    click.option("--seed", type=int, default=0, show_default=True, help="Weights and data seed."),
    click.option("--threads", type=int, default=1, show_default=True,
                 help="Intra-op CPU threads per rank (torch.set_num_threads)."),
]


def profile_options(f: Callable) -> Callable:
    for opt in reversed(_OPTIONS):
        f = opt(f)
    return f


def config_from_options(opts: dict[str, Any], default_stages: int = 2,
                        command: list[str] | None = None) -> ProfileConfig:
    """The (not yet validated) ProfileConfig for parsed click options."""
    opts = dict(opts)
    alias = opts.pop("stages_alias", None)
    stages = opts["stages"] if opts["stages"] is not None else alias
    stages = stages if stages is not None else default_stages
    return ProfileConfig(
        out=opts["out"],
        schedule=opts["schedule"],
        framework=opts.get("framework", "torch"),
        stages=stages,
        microbatches=opts["microbatches"],
        chunks=opts["chunks"],
        steps=opts["steps"],
        warmup_steps=opts["warmup_steps"],
        model=ModelConfig(
            layers=opts["layers"], hidden=opts["hidden"], ffn_mult=opts["ffn_mult"],
            batch_size=opts["batch_size"], seq_len=opts["seq_len"],
            activation_checkpointing=opts.get("activation_checkpointing", False),
            tied_embedding=opts.get("tied_embedding", False),
        ),
        imbalance=parse_imbalance(opts["imbalance"]),
        split=parse_stage_layers(opts.get("stage_layers")),
        heavy_layers=parse_heavy_layers(opts.get("heavy_layer", ())),
        dp=opts["dp"],
        tp=opts["tp"],
        dp_mode=opts["dp_mode"],
        grid=opts.get("grid", "pp-outer"),
        slow_ranks=parse_slow_ranks(opts["slow_rank"]),
        step_marks=not opts["no_step_marks"],
        single_process=opts["single_process"],
        backend=opts["backend"],
        device=opts.get("device", "auto"),
        timeout=opts["timeout"],
        annotate=not opts["no_annotate"],
        profile_memory=opts["profile_memory"],
        record_shapes=opts["record_shapes"],
        seed=opts["seed"],
        threads=opts["threads"],
        force=opts["force"],
        command=tuple(command if command is not None else canonical_command(opts)),
    )


def canonical_command(opts: dict[str, Any]) -> list[str]:
    """A complete ``pipeaudit profile`` argv reproducing ``opts`` (every option spelled out)."""
    argv = ["pipeaudit", "profile"]
    opts = dict(opts)
    alias = opts.pop("stages_alias", None)
    if opts.get("stages") is None:
        opts["stages"] = alias
    for key, value in opts.items():
        flag = "--ranks" if key == "stages" else "--" + key.replace("_", "-")
        if key in ("imbalance", "slow_rank", "heavy_layer"):
            for item in value:
                argv += [flag, item]
        elif isinstance(value, bool):
            if value:
                argv.append(flag)
        elif value is not None:
            argv += [flag, str(value)]
    return argv
