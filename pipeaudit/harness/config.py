"""``ProfileConfig``: everything one harness run needs, validated without torch.

Validation happens here, before any process is started and before torch is
imported, so a bad option combination fails in milliseconds with one clear
ConfigError line.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeaudit.errors import ConfigError
from pipeaudit.harness.catalog import check_schedule, get_spec, stage_to_rank
from pipeaudit.harness.layout import DP_MODES, GRIDS, MeshLayout
from pipeaudit.harness.plans import SINGLE_PROCESS_SCHEDULES

BACKENDS = ("auto", "gloo", "nccl")
DEVICES = ("auto", "cpu", "cuda")
#: Whose pipeline engine runs the stages: torch.distributed.pipelining, DeepSpeed's
#: PipelineEngine or Megatron-core's schedules.
FRAMEWORKS = ("torch", "deepspeed", "megatron")
#: The schedules each framework other than torch runs (its own implementation of them):
#: DeepSpeed's PipelineEngine one (TrainSchedule, 1F1B's order); Megatron-core 1F1B and, with
#: virtual pipeline stages, interleaved 1F1B.
FRAMEWORK_SCHEDULES = {"deepspeed": ("1f1b",), "megatron": ("1f1b", "interleaved-1f1b")}
#: The name each framework's runs give in their manifest (``framework.name``).
MANIFEST_NAMES = {"torch": "torch", "deepspeed": "deepspeed", "megatron": "megatron-core"}


def framework_of_manifest(name: str) -> str | None:
    """The ``--framework`` whose runs write ``name`` in their manifest (None: not one)."""
    return next((f for f, n in MANIFEST_NAMES.items() if n == name), None)


def gpu_shortage(ranks: int, gpus: int) -> str:
    """The one-line reason a multi-process GPU run cannot start on this host."""
    return (f"a GPU run needs one CUDA device per rank on this host ({ranks} ranks, {gpus} "
            "found): NCCL refuses two ranks on one GPU and gloo cannot send CUDA tensors; "
            "--single-process runs every stage in one process on the GPUs there are")


@dataclass(frozen=True)
class ModelConfig:
    """The synthetic model: ``layers`` pre-norm MLP blocks of width ``hidden``.

    Block: ``x + fc2(gelu(fc1(layernorm(x))))`` with ``fc1: hidden -> ffn_mult*hidden``.
    Input is ``(batch_size, seq_len, hidden)``; the loss is MSE against a fixed
    random target. ``batch_size`` is the global batch, split into M microbatches.
    """

    layers: int = 8
    hidden: int = 256
    ffn_mult: int = 4
    batch_size: int | None = None  #: None: 4 x M (microbatch size 4)
    seq_len: int = 64
    #: recompute each block's forward in the backward (torch.utils.checkpoint; DeepSpeed's own
    #: ``activation_checkpoint_interval=1``)
    activation_checkpointing: bool = False
    #: DeepSpeed: the first and last stage share a tied projection (``TiedLayerSpec``), whose
    #: gradients DeepSpeed all-reduces between them every step
    tied_embedding: bool = False

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class ProfileConfig:
    """One ``pipeaudit profile`` run. Build it, call :meth:`validate` (``run_profile`` does)."""

    out: str
    schedule: str = "1f1b"
    framework: str = "torch"  #: one of FRAMEWORKS
    stages: int = 2  #: P, the number of ranks of one pipeline (stages per device with single_process)
    microbatches: int = 4  #: M
    chunks: int | None = None  #: v, stages per rank; None: the schedule's default
    steps: int = 2  #: profiled steps
    warmup_steps: int = 1  #: steps before the profiler starts
    model: ModelConfig = field(default_factory=ModelConfig)
    imbalance: dict[int, int] = field(default_factory=dict)  #: stage -> integer factor
    #: layers per stage in stage order (``--stage-layers``); None: as even as possible
    split: tuple[int, ...] | None = None
    #: layer -> integer factor (``--heavy-layer K:F``): that layer is F blocks, F times the cost
    heavy_layers: dict[int, int] = field(default_factory=dict)
    dp: int = 1  #: D, data-parallel replicas of the pipeline
    tp: int = 1  #: T, tensor-parallel ranks per stage
    dp_mode: str = "fsdp"  #: how the dp dimension syncs gradients: fsdp (FSDP2) or ddp
    grid: str = "pp-outer"  #: which of pp and dp is outermost in the rank grid (GRIDS)
    slow_ranks: dict[int, int] = field(default_factory=dict)  #: global rank -> integer factor
    step_marks: bool = True  #: ProfilerStep#i spans (a profiler schedule and prof.step())
    single_process: bool = False  #: one process runs every stage (no process group)
    backend: str = "auto"
    device: str = "auto"  #: where the stages compute: auto, cpu or cuda
    timeout: float = 600.0  #: seconds for the whole run
    annotate: bool = True
    profile_memory: bool = False
    record_shapes: bool = False
    seed: int = 0
    threads: int = 1  #: intra-op threads per rank (torch.set_num_threads)
    force: bool = False
    command: tuple[str, ...] = ()  #: argv recorded in the manifest
    progress: bool | None = None  #: None: show progress when stderr is a terminal

    # ------------------------------------------------------------------ derived
    @property
    def layout(self) -> MeshLayout:
        """Where each rank sits: P x D x T, pp outermost (see ``pipeaudit.harness.layout``)."""
        return MeshLayout(self.stages, self.dp, self.tp, self.dp_mode, self.grid)

    @property
    def world_size(self) -> int:
        """Processes of the run: P x D x T (1 with ``single_process``)."""
        return 1 if self.single_process else self.layout.world_size

    @property
    def num_chunks(self) -> int:
        return self.chunks if self.chunks is not None else get_spec(self.schedule).default_chunks

    @property
    def num_stages(self) -> int:
        return self.stages * self.num_chunks

    @property
    def batch_size(self) -> int:
        return self.model.batch_size if self.model.batch_size is not None else 4 * self.microbatches

    @property
    def stage_to_rank(self) -> list[int]:
        """Global rank of each stage in pipeline replica 0 (all 0 with ``single_process``)."""
        if self.single_process:
            return [0] * self.num_stages
        positions = stage_to_rank(get_spec(self.schedule).placement, self.stages, self.num_chunks)
        ranks = self.layout.pipeline(0, 0)
        return [ranks[p] for p in positions]

    @property
    def stage_layers(self) -> list[int]:
        """Layers per stage: ``split`` when given, else contiguous, as even as possible (earlier
        stages get the extra)."""
        if self.split is not None:
            return list(self.split)
        base, extra = divmod(self.model.layers, self.num_stages)
        return [base + (1 if s < extra else 0) for s in range(self.num_stages)]

    # --------------------------------------------------------------- validation
    def validate(self, check_out: bool = True) -> "ProfileConfig":
        """Raise ConfigError on the first problem; return self when valid."""
        spec = get_spec(self.schedule)
        if self.framework == "torch":
            check_schedule(spec.name, self.stages, self.microbatches, self.num_chunks)
        elif self.stages < 2 or self.microbatches < 1:  # DeepSpeed's and Megatron's take any M
            raise ConfigError(f"--framework {self.framework} needs --ranks >= 2 and "
                              f"--microbatches >= 1, got {self.stages} and {self.microbatches}")
        m = self.model
        for name, value in (("--layers", m.layers), ("--hidden", m.hidden),
                            ("--ffn-mult", m.ffn_mult), ("--seq-len", m.seq_len),
                            ("--threads", self.threads)):
            if value < 1:
                raise ConfigError(f"{name} must be >= 1, got {value}")
        if m.layers < self.num_stages:
            raise ConfigError(
                f"--layers {m.layers} is fewer than the {self.num_stages} stages "
                f"({self.stages} ranks x {self.num_chunks} chunks); every stage needs a layer"
            )
        if self.batch_size < 1 or self.batch_size % self.microbatches != 0:
            raise ConfigError(
                f"--batch-size {self.batch_size} must be a positive multiple of "
                f"--microbatches {self.microbatches}"
            )
        if self.steps < 1:
            raise ConfigError(f"--steps must be >= 1, got {self.steps}")
        if self.warmup_steps < 0:
            raise ConfigError(f"--warmup-steps must be >= 0, got {self.warmup_steps}")
        if self.backend not in BACKENDS:
            raise ConfigError(f"--backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        self._validate_device()
        if not self.timeout > 0:
            raise ConfigError(f"--timeout must be > 0 seconds, got {self.timeout}")
        for stage, factor in self.imbalance.items():
            if not 0 <= stage < self.num_stages:
                raise ConfigError(
                    f"--imbalance stage {stage} does not exist (stages are 0..{self.num_stages - 1})"
                )
            if not isinstance(factor, int) or factor < 1:
                raise ConfigError(
                    f"--imbalance factor for stage {stage} must be an integer >= 1, got {factor!r}"
                )
        self._validate_split()
        self._validate_layout()
        self._validate_single_process()
        self._validate_framework()
        if check_out:
            check_out_dir(self.out, self.force)
        return self

    def _validate_split(self) -> None:
        layers = self.model.layers
        if self.split is not None:
            split = list(self.split)
            if len(split) != self.num_stages:
                raise ConfigError(
                    f"--stage-layers gives {len(split)} stages; the run has {self.num_stages} "
                    f"({self.stages} ranks x {self.num_chunks} chunks)")
            if any(not isinstance(n, int) or n < 1 for n in split):
                raise ConfigError(f"--stage-layers {','.join(map(str, split))}: every stage "
                                  "needs at least one layer")
            if sum(split) != layers:
                raise ConfigError(f"--stage-layers {','.join(map(str, split))} sums to "
                                  f"{sum(split)} layers; --layers is {layers}")
        for layer, factor in self.heavy_layers.items():
            if not 0 <= layer < layers:
                raise ConfigError(f"--heavy-layer layer {layer} does not exist (layers are "
                                  f"0..{layers - 1})")
            if not isinstance(factor, int) or factor < 1:
                raise ConfigError(f"--heavy-layer factor for layer {layer} must be an integer "
                                  f">= 1, got {factor!r}")

    def layer_blocks(self, stage: int) -> list[int]:
        """Blocks of each layer of global ``stage``: its ``--heavy-layer`` factor times the
        stage's ``--imbalance`` factor."""
        first = sum(self.stage_layers[:stage])
        f = self.imbalance.get(stage, 1)
        return [f * self.heavy_layers.get(first + i, 1) for i in range(self.stage_layers[stage])]

    def _validate_layout(self) -> None:
        for name, value in (("--dp", self.dp), ("--tp", self.tp)):
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
        if self.grid not in GRIDS:
            raise ConfigError(f"--grid must be one of {', '.join(GRIDS)}, got {self.grid!r}")
        if self.dp_mode not in DP_MODES:
            raise ConfigError(f"--dp-mode must be one of {', '.join(DP_MODES)}, got {self.dp_mode!r}")
        if self.tp > 1 and self.dp > 1 and self.dp_mode == "ddp":
            raise ConfigError(
                "--dp-mode ddp cannot be combined with --tp > 1 (torch's DDP does not take the "
                "tensor-parallel DTensor parameters); use --dp-mode fsdp"
            )
        if self.dp > 1 and self.dp_mode == "ddp" and self.schedule == "dualpipev":
            raise ConfigError(
                "--dp-mode ddp does not run dualpipev in torch 2.13 (DDP's reducer fails on its "
                "overlapped forward/backward pairs); use --dp-mode fsdp"
            )
        ffn = self.model.ffn_mult * self.model.hidden
        if self.tp > 1 and (ffn % self.tp or self.model.hidden % self.tp):
            raise ConfigError(
                f"--tp {self.tp} must divide --hidden {self.model.hidden} and the MLP width "
                f"--ffn-mult x --hidden = {ffn} (each tensor-parallel rank holds an equal shard)"
            )
        world = self.world_size
        for rank, factor in self.slow_ranks.items():
            if not 0 <= rank < world:
                raise ConfigError(
                    f"--slow-rank rank {rank} does not exist (ranks are 0..{world - 1}: "
                    f"{self.stages} stages x {self.dp} dp x {self.tp} tp)"
                )
            if not isinstance(factor, int) or factor < 1:
                raise ConfigError(
                    f"--slow-rank factor for rank {rank} must be an integer >= 1, got {factor!r}"
                )
        if self.tp > 1 and any(f > 1 for f in self.slow_ranks.values()):
            raise ConfigError(
                "--slow-rank cannot be combined with --tp > 1: a rank that repeats its blocks "
                "would run more tensor-parallel collectives than its peers and hang them; "
                "use --imbalance to slow a whole stage"
            )

    def _validate_device(self) -> None:
        if self.device not in DEVICES:
            raise ConfigError(f"--device must be one of {', '.join(DEVICES)}, got {self.device!r}")
        if self.device == "cpu" and self.backend == "nccl":
            raise ConfigError("--backend nccl needs --device cuda (or auto): NCCL runs on GPUs")
        if self.device == "cuda" and self.backend == "gloo" and not self.single_process:
            # stages on the GPUs there are, activations and gradients through host memory
            if self.dp != 1 or self.tp != 1 or self.framework != "torch":
                raise ConfigError(
                    "--device cuda --backend gloo (stages computing on the GPU, P2P over gloo "
                    "through host memory) runs one torch.distributed.pipelining pipeline: no "
                    "--dp, --tp or --framework")

    def _validate_single_process(self) -> None:
        if not self.single_process:
            return
        if self.schedule not in SINGLE_PROCESS_SCHEDULES:
            raise ConfigError(
                f"--single-process runs {', '.join(SINGLE_PROCESS_SCHEDULES)} (hand-written "
                f"loops, no process group), not {self.schedule}"
            )
        if self.dp != 1 or self.tp != 1:
            raise ConfigError("--single-process runs one pipeline: --dp and --tp must be 1")
        if self.slow_ranks:
            raise ConfigError("--single-process has one rank: use --imbalance STAGE=FACTOR "
                              "instead of --slow-rank")

    def _validate_framework(self) -> None:
        if self.framework not in FRAMEWORKS:
            raise ConfigError(f"--framework must be one of {', '.join(FRAMEWORKS)}, "
                              f"got {self.framework!r}")
        if self.model.tied_embedding and self.framework != "deepspeed":
            raise ConfigError("--tied-embedding is DeepSpeed's TiedLayerSpec: use it with "
                              "--framework deepspeed")
        if self.framework == "torch":
            return
        allowed = FRAMEWORK_SCHEDULES[self.framework]
        if self.schedule not in allowed:
            what = ("its own TrainSchedule, which is 1F1B's order" if self.framework == "deepspeed"
                    else "its own 1F1B, with or without virtual stages")
            raise ConfigError(f"--framework {self.framework} runs {what}: use --schedule "
                              f"{' or '.join(allowed)}, not {self.schedule}")
        if self.single_process or self.tp != 1:
            raise ConfigError(f"--framework {self.framework} runs one process per stage and "
                              "replica: no --single-process, no --tp")
        if self.framework == "deepspeed" and self.chunks not in (None, 1):
            raise ConfigError(f"--framework {self.framework} holds one stage per rank: no --chunks")
        if (self.framework == "megatron" and self.num_chunks > 1
                and (self.microbatches < self.stages or self.microbatches % self.stages)):
            # schedules.py: P <= microbatch_group_size_per_vp_stage (default P) <= M, and M
            # divides into such groups or leaves at least P over
            raise ConfigError(
                f"Megatron-core's interleaved schedule needs --microbatches a multiple of "
                f"--ranks ({self.stages}) and at least as many: its microbatch groups of P "
                f"contiguous microbatches per virtual stage; got {self.microbatches}")
        if self.framework == "megatron" and self.dp != 1:
            raise ConfigError("--framework megatron runs one pipeline here: no --dp")

    # ------------------------------------------------------------ serialisation
    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["imbalance"] = {str(k): v for k, v in self.imbalance.items()}
        d["slow_ranks"] = {str(k): v for k, v in self.slow_ranks.items()}
        d["split"] = None if self.split is None else list(self.split)
        d["heavy_layers"] = {str(k): v for k, v in self.heavy_layers.items()}
        d["command"] = list(self.command)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ProfileConfig":
        d = dict(d)
        d["model"] = ModelConfig(**d.get("model", {}))  # older manifests lack the newer fields
        d["imbalance"] = {int(k): int(v) for k, v in d.get("imbalance", {}).items()}
        d["slow_ranks"] = {int(k): int(v) for k, v in d.get("slow_ranks", {}).items()}
        d["command"] = tuple(d.get("command", ()))
        d["split"] = None if d.get("split") is None else tuple(int(n) for n in d["split"])
        d["heavy_layers"] = {int(k): int(v) for k, v in d.get("heavy_layers", {}).items()}
        return cls(**d)

    def replace(self, **changes: Any) -> "ProfileConfig":
        return dataclasses.replace(self, **changes)


def parse_imbalance(items: list[str] | tuple[str, ...]) -> dict[int, int]:
    """Parse repeated ``STAGE=FACTOR`` options, e.g. ``("1=3",)`` -> ``{1: 3}``."""
    return _parse_factors(items, "--imbalance", "STAGE")


def parse_stage_layers(text: str | None) -> tuple[int, ...] | None:
    """``"3,2,2,1"`` -> ``(3, 2, 2, 1)``; None or empty -> None."""
    if not text:
        return None
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise ConfigError(f"--stage-layers expects layer counts separated by commas "
                          f"(e.g. 3,2,2,1), got {text!r}") from None


def parse_heavy_layers(items: list[str] | tuple[str, ...]) -> dict[int, int]:
    """Parse repeated ``LAYER:FACTOR`` options, e.g. ``("0:4",)`` -> ``{0: 4}``."""
    return _parse_factors(items, "--heavy-layer", "LAYER", sep=":")


def parse_slow_ranks(items: list[str] | tuple[str, ...]) -> dict[int, int]:
    """Parse repeated ``RANK=FACTOR`` options, e.g. ``("5=3",)`` -> ``{5: 3}``."""
    return _parse_factors(items, "--slow-rank", "RANK")


def _parse_factors(items: list[str] | tuple[str, ...], option: str, key: str,
                   sep: str = "=") -> dict[int, int]:
    out: dict[int, int] = {}
    for item in items:
        key_s, found, factor_s = item.partition(sep)
        try:
            if not found:
                raise ValueError
            index, factor = int(key_s), int(factor_s)
        except ValueError:
            raise ConfigError(
                f"{option} expects {key}{sep}FACTOR with integers (e.g. 1{sep}3), got {item!r}"
            ) from None
        if index in out:
            raise ConfigError(f"{option} gives {key.lower()} {index} twice")
        out[index] = factor
    return out


def check_out_dir(out: str, force: bool) -> None:
    """An existing non-empty output directory is refused unless ``force``."""
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{out}: --out exists and is not a directory")
    if path.is_dir() and any(path.iterdir()) and not force:
        raise ConfigError(f"{out}: --out is not empty (use --force to write into it)")
    parent = path.resolve().parent
    if not path.exists() and not os.access(_existing_ancestor(parent), os.W_OK):
        raise ConfigError(f"{out}: cannot create --out here (no write permission)")


def _existing_ancestor(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path
