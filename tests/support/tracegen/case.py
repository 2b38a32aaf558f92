"""One generated case: every dimension the generator draws, as plain values."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Case:
    """A pipeline run to generate. Times are µs."""

    schedule: str  #: pipeaudit catalogue name (see orders.TORCH_CLASSES)
    pp: int
    v: int
    m: int
    steps: int = 1
    dp: int = 1
    tp: int = 1
    #: rank grid: "pp-outer" (rank = stage·D·T + replica·T + t: torch's ("pp", "dp") mesh,
    #: DeepSpeed) or "dp-outer" (rank = replica·P·T + stage·T + t)
    grid: str = "pp-outer"
    #: process groups named as a DeviceMesh writes them (mesh_pp, ...) or "undefined"
    named_groups: bool = True
    annotated: bool = False
    #: "gloo": CPU trace, blocking receive op spanning the wait; "nccl": GPU trace, kernels
    #: on a compute stream, P2P as SendRecv kernels on a NCCL stream
    p2p: str = "gloo"
    batched: bool = False  #: sends and receives that follow each other go as one batch
    profiler_steps: bool = True
    optimizer: bool = True
    batch_split: bool = True  #: torch's step(): aten::tensor_split on the first / last stage
    op_shape: str = "distinct"
    layers: int = 1
    nested: bool = True
    loss: bool = True
    data_load: bool = False
    heavy_stage: int | None = None  #: a stage (global index) heavier by heavy_factor
    heavy_chunk: int | None = None  #: a chunk (local index, every rank) heavier
    heavy_factor: float = 1.0
    heavy_by_layers: bool = False  #: heavier by more layers (else by longer ops)
    deschedule: str | None = None  #: one op 100x: "compute" (a compute op) or "prep"
    one_rank: int | None = None  #: write only this rank's file
    shuffle: bool = False
    state_steps: bool = False  #: the user states the number of steps
    state_microbatches: bool = False  #: the user states M
    latency_us: float = 30.0
    seed: int = 0
    #: torch's runtime glue around actions (views before a backward call, a W's in-place add, the
    #: detach at a V's turn); without it, actions of a split backward may run back to back with
    #: nothing between them (a user's own schedule)
    engine_glue: bool = False

    def describe(self) -> str:
        """One line naming every non-default dimension."""
        d = asdict(self)
        base = asdict(Case(self.schedule, self.pp, self.v, self.m))
        extra = ", ".join(f"{k}={v!r}" for k, v in d.items()
                          if k not in ("schedule", "pp", "v", "m") and v != base[k])
        return f"{self.schedule} P={self.pp} v={self.v} M={self.m}" + (f" ({extra})" if extra else "")

    def shape(self) -> str:
        """The coarse shape a failure is tallied under."""
        kind = "annotated" if self.annotated else "bare"
        return f"{self.schedule}/{kind}/{self.p2p}"
