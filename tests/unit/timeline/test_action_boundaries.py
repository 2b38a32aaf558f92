"""What an action holds (docs/metrics.md), read without annotations and with them: traces built
op by op with a known answer for where each forward and backward starts and ends."""

from __future__ import annotations

import polars as pl

import pipeaudit
from tests.support.synth import trace, write, x

T0 = 1_700_000_000_000_000
FWD = ("aten::layer_norm", "aten::linear", "aten::gelu", "aten::linear", "aten::add")
BWD = tuple(f"autograd::engine::evaluate_function: {n}Backward0"
            for n in ("Add", "Addmm", "Gelu", "Addmm", "NativeLayerNorm"))


class Ops:
    """Top-level ops of one thread laid end to end (10 µs each, 2 µs apart); remembers where
    each labelled stretch starts and ends."""

    def __init__(self) -> None:
        self.t = 0
        self.events: list[dict] = []
        self.marks: dict[str, tuple[int, int]] = {}

    def run(self, names, label: str | None = None, dur: int = 10, inside: str | None = None):
        start = self.t
        for name in names:
            self.events.append(x(name, T0 + self.t, dur))
            self.t += dur + 2
        if label:
            self.marks[label] = (T0 + start, T0 + self.t - 2)
        if inside:
            self.events.append(x(inside, T0 + start - 1, self.t - start, cat="user_annotation"))
        return self

    def gap(self, us: int) -> "Ops":
        self.t += us
        return self

    def span(self, name: str, first: str, last: str) -> None:
        """An annotation from the start of stretch ``first`` to the end of stretch ``last``."""
        self.events.append(x(name, self.marks[first][0] - 1,
                             self.marks[last][1] - self.marks[first][0] + 2, cat="user_annotation"))


def _read(tmp_path, ops: Ops, rank: int = 0, world: int = 2) -> pl.DataFrame:
    step = x("ProfilerStep#0", T0 - 5, ops.t + 10, cat="user_annotation")
    path = write(tmp_path / f"rank{rank}.json", trace([step] + ops.events, rank=rank,
                                                      world_size=world))
    return pipeaudit.load([str(path)], num_microbatches=2).actions().sort("start")


def _first_stage() -> Ops:
    """Stage 0 of two, 1F1B, M = 2: the step's start-up work and the forwards' bookkeeping
    around forwards that need no receive."""
    o = Ops()
    o.run(["aten::zeros"], "startup").gap(3000)  # Megatron-core's total_num_tokens, then a wait
    o.run(FWD, "F0").run(["c10d::send"]).run(["aten::add_"], "bookkeeping")
    o.run(FWD, "F1").run(["aten::add_", "aten::empty"]).run(["c10d::send", "c10d::recv_"])
    o.run(BWD, "B0").run(["c10d::send", "c10d::recv_"]).run(BWD, "B1").run(["c10d::send"])
    return o


def test_startup_work_and_bookkeeping_are_no_forward(tmp_path):
    o = _first_stage()
    acts = _read(tmp_path, o)
    fwd = acts.filter(pl.col("kind") == "F")
    assert fwd["start"].to_list() == [o.marks["F0"][0] * 1000, o.marks["F1"][0] * 1000]
    assert fwd["compute_us"].to_list() == [50.0, 50.0]


def test_fsdp_hooks_are_no_action_compute(tmp_path):
    """An FSDP all-gather's copy-in inside the first forward's call is no compute of that
    forward, annotated or not."""
    for annotate in (False, True):
        o = Ops()
        o.run(["aten::empty", "aten::copy_"], "copy_in", inside="FSDP::pre_forward")
        o.run(FWD, "F0").run(["c10d::send"]).run(FWD, "F1").run(["c10d::send", "c10d::recv_"])
        o.run(BWD, "B0").run(["c10d::send", "c10d::recv_"]).run(BWD, "B1").run(["c10d::send"])
        if annotate:
            o.span("PP:0F0", "copy_in", "F0")
            o.span("PP:0F1", "F1", "F1")
            o.span("PP:0B0", "B0", "B0")
            o.span("PP:0B1", "B1", "B1")
        acts = _read(tmp_path / str(annotate), o)
        f0 = acts.filter((pl.col("kind") == "F") & (pl.col("microbatch") == 0)).row(0, named=True)
        assert f0["compute_us"] == 50.0, annotate
        assert f0["compute_start"] == o.marks["F0"][0] * 1000, annotate


def test_last_stage_loss_is_the_forwards_and_the_seed_the_backwards(tmp_path):
    """Stage 1 of two: each forward runs straight into its backward; the loss between is the
    forward's, the gradient seed (``aten::ones_like``) the backward's."""
    o = Ops()
    for mb in (0, 1):
        o.run(["c10d::recv_"]).run(FWD + ("aten::mse_loss", "aten::div"), f"F{mb}")
        o.run(["aten::ones_like"] + list(BWD), f"B{mb}").run(["c10d::send"])
    acts = _read(tmp_path, o, rank=1)
    for kind, n_ops in (("F", 7), ("B", 6)):
        rows = acts.filter(pl.col("kind") == kind)
        assert rows["compute_us"].to_list() == [10.0 * n_ops] * 2, kind
        assert rows["compute_start"].to_list() == [o.marks[f"{kind}{mb}"][0] * 1000
                                                   for mb in (0, 1)], kind


def test_the_detach_before_a_send_is_the_sends_however_long_it_takes(tmp_path):
    """torch's ``get_fwd_send_ops`` detaches each output it sends, after ``forward_one_chunk``:
    no forward's compute, read without annotations, with spans of the forward alone, or with
    spans that hold the detach too (GPipe's ``Forward i``), even when the rank is descheduled
    in it for 4 ms (a 1F1B step that read 2 % less bubble without annotations)."""
    for spans in ("none", "forward", "forward and detach"):
        o = Ops()
        o.run(FWD, "F0").run(["aten::detach"], "prep0").run(["c10d::send"])
        o.run(FWD, "F1").run(["aten::detach"], "prep1", dur=4000)
        o.run(["c10d::send", "c10d::recv_"])
        o.run(BWD, "B0").run(["c10d::send", "c10d::recv_"]).run(BWD, "B1").run(["c10d::send"])
        if spans != "none":
            for mb in (0, 1):
                o.span(f"PP:0F{mb}", f"F{mb}", f"prep{mb}" if spans == "forward and detach" else f"F{mb}")
            o.span("PP:0B0", "B0", "B0")
            o.span("PP:0B1", "B1", "B1")
        acts = _read(tmp_path / spans.replace(" ", "_"), o)
        fwd = acts.filter(pl.col("kind") == "F")
        assert fwd["compute_us"].to_list() == [50.0, 50.0], spans
        assert fwd["compute_end"].to_list() == [o.marks[f"F{mb}"][1] * 1000 for mb in (0, 1)], spans


def test_a_steps_bookkeeping_made_of_the_forwards_cheap_ops_is_no_forward(tmp_path):
    """No step marks: the second step's batch handling (ops the forward also runs, none of its
    matmuls) runs straight into its first forward. A forward grows over more of its own ops
    only where they hold its heaviest op (a chunk with more layers), so it starts where its own
    ops do; before, it took the two ``aten::add`` in."""
    o = Ops()
    for step in (0, 1):
        if step:
            o.run(["aten::add", "aten::add"], "batch")
        o.run(FWD, f"F0s{step}").run(["c10d::send"]).run(FWD, f"F1s{step}")
        o.run(["c10d::send", "c10d::recv_"]).run(BWD).run(["c10d::send", "c10d::recv_"])
        o.run(BWD).run(["c10d::send"])
    path = write(tmp_path / "rank0.json", trace(o.events, rank=0, world_size=2))
    acts = pipeaudit.load([str(path)], num_microbatches=2).actions().sort("start")
    fwd = acts.filter(pl.col("kind") == "F")
    assert fwd["compute_us"].to_list() == [50.0] * 4
    assert fwd["compute_start"].to_list() == [o.marks[f"F{mb}s{step}"][0] * 1000
                                              for step in (0, 1) for mb in (0, 1)]
