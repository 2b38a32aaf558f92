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

BACKENDS = ("auto", "gloo", "nccl")


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

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class ProfileConfig:
    """One ``pipeaudit profile`` run. Build it, call :meth:`validate` (``run_profile`` does)."""

    out: str
    schedule: str = "1f1b"
    stages: int = 2  #: P, the number of ranks
    microbatches: int = 4  #: M
    chunks: int | None = None  #: v, stages per rank; None: the schedule's default
    steps: int = 2  #: profiled steps
    warmup_steps: int = 1  #: steps before the profiler starts
    model: ModelConfig = field(default_factory=ModelConfig)
    imbalance: dict[int, int] = field(default_factory=dict)  #: stage -> integer factor
    backend: str = "auto"
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
        return stage_to_rank(get_spec(self.schedule).placement, self.stages, self.num_chunks)

    @property
    def stage_layers(self) -> list[int]:
        """Blocks per stage: contiguous, as even as possible (earlier stages get the extra)."""
        base, extra = divmod(self.model.layers, self.num_stages)
        return [base + (1 if s < extra else 0) for s in range(self.num_stages)]

    # --------------------------------------------------------------- validation
    def validate(self, check_out: bool = True) -> "ProfileConfig":
        """Raise ConfigError on the first problem; return self when valid."""
        spec = get_spec(self.schedule)
        check_schedule(spec.name, self.stages, self.microbatches, self.num_chunks)
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
        if check_out:
            check_out_dir(self.out, self.force)
        return self

    # ------------------------------------------------------------ serialisation
    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["imbalance"] = {str(k): v for k, v in self.imbalance.items()}
        d["command"] = list(self.command)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ProfileConfig":
        d = dict(d)
        d["model"] = ModelConfig(**d.get("model", {}))
        d["imbalance"] = {int(k): int(v) for k, v in d.get("imbalance", {}).items()}
        d["command"] = tuple(d.get("command", ()))
        return cls(**d)

    def replace(self, **changes: Any) -> "ProfileConfig":
        return dataclasses.replace(self, **changes)


def parse_imbalance(items: list[str] | tuple[str, ...]) -> dict[int, int]:
    """Parse repeated ``STAGE=FACTOR`` options, e.g. ``("1=3",)`` -> ``{1: 3}``."""
    out: dict[int, int] = {}
    for item in items:
        stage_s, sep, factor_s = item.partition("=")
        try:
            if not sep:
                raise ValueError
            stage, factor = int(stage_s), int(factor_s)
        except ValueError:
            raise ConfigError(
                f"--imbalance expects STAGE=FACTOR with integers (e.g. 1=3), got {item!r}"
            ) from None
        if stage in out:
            raise ConfigError(f"--imbalance gives stage {stage} twice")
        out[stage] = factor
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
