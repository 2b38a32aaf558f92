"""The conformance grid: which real runs are made and how each is read. Torch-free.

A :class:`Cell` is one harness run (framework, schedule, P, M, v, D and grid order, a heavy
stage, activation checkpointing, DeepSpeed's tied layer, ProfilerStep marks) and one way of
reading it (every rank's file, one rank's alone, or every rank's with its events shuffled). :func:`full_grid` is the whole matrix:
every framework's schedules over P in {2, 3, 4} and M in {P - 1, P, 2P + 1} where the
framework runs them, then each other dimension varied from a base run, and the shapes that
broke earlier readings. :data:`CI_SLICE` is the fixed slice CI runs on every change.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pipeaudit.errors import ConfigError

FRAMEWORKS = ("torch", "deepspeed", "megatron")
#: none; one middle stage 3x; the first stage 2x; the last stage 2x
IMBALANCES = ("none", "mid3", "first2", "last2")
#: every rank's trace, one rank's alone (the middle position of the first pipeline), every
#: rank's with its events in a random order, or every rank's without any span that names an
#: action (GPipe's own ``Forward i`` / ``Backward i`` too: the ops alone)
READINGS = ("all", "one", "shuffled", "ops")


@dataclass(frozen=True)
class Cell:
    """One run of the grid and one reading of it."""

    framework: str = "torch"
    schedule: str = "1f1b"
    P: int = 2
    M: int = 4
    v: int | None = None  #: chunks per rank; None: the schedule's default
    dp: int = 1
    grid: str = "pp-outer"
    imbalance: str = "none"
    checkpointing: bool = False
    tied: bool = False
    step_marks: bool = True
    reading: str = "all"
    hidden: int = 256
    seq_len: int = 8

    @property
    def name(self) -> str:
        """A short unique name, e.g. ``deepspeed-1f1b-p2-m4-dp2-dpouter-ckpt``."""
        parts = [self.framework, self.schedule, f"p{self.P}", f"m{self.M}"]
        if self.v is not None:
            parts.append(f"v{self.v}")
        if self.dp > 1:
            parts.append(f"dp{self.dp}" + ("-dpouter" if self.grid == "dp-outer" else ""))
        if self.imbalance != "none":
            parts.append(self.imbalance)
        parts += [flag for flag, on in (("ckpt", self.checkpointing), ("tied", self.tied),
                                        ("nosteps", not self.step_marks)) if on]
        if self.reading == "one":
            parts.append(f"rank{self.one_rank}")
        elif self.reading in ("shuffled", "ops"):
            parts.append({"shuffled": "shuffled", "ops": "opsonly"}[self.reading])
        return "-".join(parts)

    @property
    def may_be_uncertain(self) -> bool:
        """Whether the reading may answer "cannot tell" (``READING_UNCERTAIN``) instead of the
        run's shape: the shapes of :data:`CANNOT_SETTLE`, read from the ops alone."""
        return self.reading == "ops" and (self.framework, self.schedule) in CANNOT_SETTLE

    @property
    def run_key(self) -> str:
        """The name of the run this cell reads (cells differing only in reading share it)."""
        return replace(self, reading="all").name

    @property
    def imbalance_map(self) -> dict[int, int]:
        """``--imbalance`` of the run: {stage: factor}."""
        stages = self.P * (self.v or 1)
        return {"none": {}, "mid3": {1: 3}, "first2": {0: 2},
                "last2": {stages - 1: 2}}[self.imbalance]

    @property
    def one_rank(self) -> int:
        """The rank read alone: the second stage position of the first pipeline."""
        if self.dp > 1 and self.grid == "pp-outer":
            return self.dp  # position 1 of replica 0
        return 1

    @property
    def layout_given(self) -> str | None:
        """The ``--layout`` a user gives to read this cell: one rank's file of a DeepSpeed job
        of several replicas cannot say which of its unnamed groups is the pipeline."""
        if self.framework != "deepspeed" or self.dp == 1 or self.reading != "one":
            return None
        dims = [f"pp={self.P}", f"dp={self.dp}"]
        return ",".join(dims if self.grid == "pp-outer" else dims[::-1])

    def config(self, out: str):
        """The harness's ProfileConfig of this cell's run (not yet validated)."""
        from pipeaudit.harness.config import ModelConfig, ProfileConfig

        stages = self.P * (self.v or 1)
        return ProfileConfig(
            out=out, schedule=self.schedule, framework=self.framework, stages=self.P,
            microbatches=self.M, chunks=self.v, steps=2, warmup_steps=1,
            model=ModelConfig(layers=2 * stages, hidden=self.hidden, ffn_mult=4,
                              seq_len=self.seq_len,
                              activation_checkpointing=self.checkpointing,
                              tied_embedding=self.tied),
            imbalance=self.imbalance_map, dp=self.dp, grid=self.grid, step_marks=self.step_marks, backend="gloo", device="cpu", timeout=900.0,
            progress=False)

    def problem(self) -> str | None:
        """Why the harness cannot run this cell (None: it can)."""
        try:
            self.config("/nonexistent-conformance-out").validate(check_out=False)
        except ConfigError as e:
            return str(e)
        return None


#: Runs whose reading from the ops alone may be "cannot tell" (framework, schedule): none of
#: the grid's today (docs/conformance.md lists the shapes the reader cannot settle).
CANNOT_SETTLE: frozenset[tuple[str, str]] = frozenset()
#: torch's multi-stage schedules, read from the ops alone (their ``PP:`` spans removed, as in a
#: trace of an older torch or of a user's own V schedule).
MULTI_STAGE = ("interleaved-1f1b", "looped-bfs", "interleaved-zb", "zbv", "dualpipev")


def _m_values(P: int) -> tuple[int, ...]:
    return (P - 1, P, 2 * P + 1)


#: The schedules each framework runs, with their chunk counts.
TORCH_SCHEDULES: tuple[tuple[str, int | None], ...] = (
    ("naive", None), ("gpipe", None), ("1f1b", None), ("interleaved-1f1b", 2),
    ("looped-bfs", 2), ("interleaved-zb", 2), ("zbv", 2), ("dualpipev", 2))
FRAMEWORK_SCHEDULES: dict[str, tuple[tuple[str, int | None], ...]] = {
    "torch": TORCH_SCHEDULES,
    "deepspeed": (("1f1b", None),),
    "megatron": (("1f1b", None), ("interleaved-1f1b", 2)),
}


def base_cells() -> list[Cell]:
    """Every framework's schedules over P in {2, 3, 4} and M in {P - 1, P, 2P + 1}."""
    out = []
    for fw, schedules in FRAMEWORK_SCHEDULES.items():
        for schedule, v in schedules:
            for P in (2, 3, 4):
                for M in _m_values(P):
                    out.append(Cell(fw, schedule, P, M, v))
    return out


def variation_cells() -> list[Cell]:
    """Each other dimension varied from a base run of each un-annotated framework."""
    bases = [Cell("torch", "1f1b", 3, 4), Cell("torch", "gpipe", 3, 4),
             Cell("deepspeed", "1f1b", 3, 4), Cell("megatron", "1f1b", 3, 4),
             Cell("megatron", "interleaved-1f1b", 2, 4, 2)]
    out = []
    for base in bases:
        for imb in IMBALANCES[1:]:
            out.append(replace(base, imbalance=imb))
        out.append(replace(base, checkpointing=True))
        out.append(replace(base, step_marks=False))
        out.append(replace(base, reading="one"))
        out.append(replace(base, reading="shuffled"))
        if base.framework != "megatron":  # the harness runs one Megatron pipeline
            for grid in ("pp-outer", "dp-outer"):
                out.append(replace(base, P=2, M=4, dp=2, grid=grid))
                out.append(replace(base, P=2, M=4, dp=2, grid=grid, reading="one"))
    out.append(Cell("torch", "gpipe", 3, 4, reading="ops"))
    ds = Cell("deepspeed", "1f1b", 3, 4)
    out += [replace(ds, tied=True), replace(ds, tied=True, checkpointing=True),
            replace(ds, P=4, M=3, tied=True, imbalance="last2")]
    return out


#: The shapes that broke the un-annotated reading before (issue 42), rebuilt with the harness.
REGRESSION_CELLS: tuple[Cell, ...] = (
    Cell("deepspeed", "1f1b", 2, 8, dp=2),  # pipe-outer 2 x 2, M = 8, ProfilerStep marks
    Cell("deepspeed", "1f1b", 2, 4, dp=2, grid="dp-outer"),
    Cell("deepspeed", "1f1b", 3, 5),
    Cell("deepspeed", "1f1b", 4, 6, checkpointing=True),
    Cell("torch", "gpipe", 8, 5, imbalance="mid3", hidden=64, seq_len=8),
    Cell("torch", "gpipe", 8, 5, imbalance="mid3", hidden=64, seq_len=8, reading="ops"),
)


def ops_only_cells() -> list[Cell]:
    """torch's multi-stage schedules at P = 2 and 3 with their spans removed, and a heavy
    chunk under interleaved 1F1B for torch (spans removed) and Megatron-core."""
    out = [Cell("torch", s, P, 2 * P, 2, reading="ops") for s in MULTI_STAGE for P in (2, 3)]
    for P in (2, 4):
        out.append(Cell("torch", "interleaved-1f1b", P, 2 * P, 2, imbalance="mid3", reading="ops"))
        out.append(Cell("megatron", "interleaved-1f1b", P, 2 * P, 2, imbalance="mid3"))
    return out


def full_grid() -> list[Cell]:
    """The whole matrix, each cell once, runnable cells only."""
    seen: dict[str, Cell] = {}
    for cell in base_cells() + variation_cells() + list(REGRESSION_CELLS) + ops_only_cells():
        if cell.name not in seen and cell.problem() is None:
            seen[cell.name] = cell
    return list(seen.values())


#: The slice CI runs: every framework, both grid orders, checkpointing, a tied layer, a heavy
#: stage, M < P, no step marks, one rank's file and events out of order (small runs, P <= 3).
CI_SLICE: tuple[Cell, ...] = (
    Cell("torch", "1f1b", 2, 4),
    Cell("torch", "1f1b", 3, 7, imbalance="mid3"),
    Cell("torch", "gpipe", 3, 2),
    Cell("torch", "1f1b", 3, 3, checkpointing=True, step_marks=False),
    Cell("torch", "1f1b", 2, 4, dp=2, grid="dp-outer"),
    Cell("torch", "interleaved-1f1b", 2, 4, 2),
    Cell("deepspeed", "1f1b", 3, 5),
    Cell("deepspeed", "1f1b", 3, 5, reading="shuffled"),
    Cell("deepspeed", "1f1b", 2, 4, dp=2, grid="dp-outer"),
    Cell("deepspeed", "1f1b", 2, 4, dp=2, grid="dp-outer", reading="one"),
    Cell("deepspeed", "1f1b", 2, 3, checkpointing=True, tied=True, imbalance="last2"),
    Cell("megatron", "1f1b", 3, 2, imbalance="first2"),
    Cell("megatron", "interleaved-1f1b", 2, 4, 2, step_marks=False),
    Cell("megatron", "interleaved-1f1b", 2, 4, 2, step_marks=False, reading="one"),
    Cell("torch", "looped-bfs", 2, 4, 2, reading="ops"),
    Cell("torch", "zbv", 2, 4, 2, reading="ops"),
)
