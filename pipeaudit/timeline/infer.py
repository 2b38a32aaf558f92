"""Infer F and B actions on traces that carry no per-action annotation.

torch's ``Schedule1F1B`` writes none, so its actions are read off the ops:
on the thread that runs the autograd engine, the top-level ops form runs
separated by point-to-point communication (``c10d::send``/``c10d::recv_``) and
by switches between backward ops (``autograd::engine::evaluate_function: …``)
and other ops.

- every maximal run of backward ops is one B action;
- a run of other ops is a forward candidate when the next thing after it is a
  send or a backward run (a forward's output goes somewhere); within a step the
  candidates with the most compute are kept, as many as there are B actions
  (each microbatch has one F and one B per stage in the schedules this applies
  to: GPipe and 1F1B with one stage per rank), which drops bookkeeping such as
  ``aten::detach_`` after a backward;
- microbatches are numbered by execution order within the step.

Ranks without any point-to-point op (send/recv) are not pipeline stages and
get no inferred actions. This works for one stage per rank. Multi-stage schedules in torch are always
annotated (``PP:`` spans), and other frameworks can use ``--action-pattern``.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from pipeaudit.timeline.ops import RankOps
from pipeaudit.timeline.recognise import SPAN_SCHEMA


def main_thread(ops: RankOps) -> str | None:
    """The thread that runs the pipeline: most backward ops, else most compute time."""
    top = ops.cpu_ops
    if top.height == 0:
        return None
    by_tid = top.group_by("tid").agg(
        nb=pl.col("backward").sum(), busy=(pl.col("end") - pl.col("start")).sum()
    ).sort(["nb", "busy"], descending=True)
    return str(by_tid["tid"][0])


def infer_spans(ops: RankOps, stage: int, windows: list[tuple[int, int]]) -> pl.DataFrame:
    """F/B action spans of one rank, inferred from its ops within each step window."""
    tid = main_thread(ops)
    if tid is None or not bool(ops.cpu_ops["p2p"].any()):
        # no point-to-point traffic: data-parallel or single-process training, not a pipeline
        return pl.DataFrame(schema=SPAN_SCHEMA)
    seq = ops.cpu_ops.filter(pl.col("tid") == tid).sort("start")
    starts = seq["start"].to_numpy()
    ends = seq["end"].to_numpy()
    comm = seq["comm"].to_numpy()
    send = seq["send"].to_numpy()
    bwd = seq["backward"].to_numpy()
    rows: list[tuple] = []
    for lo, hi in windows:
        i0 = int(np.searchsorted(starts, lo, side="left"))
        i1 = int(np.searchsorted(starts, hi, side="left"))
        rows.extend(_infer_window(starts[i0:i1], ends[i0:i1], comm[i0:i1], send[i0:i1],
                                  bwd[i0:i1], stage, tid))
    return pl.DataFrame(rows, schema=SPAN_SCHEMA, orient="row")


def _infer_window(starts, ends, comm, send, bwd, stage: int, tid: str) -> list[tuple]:
    # runs: (class, first index, last index); class "c" comm (one op each), "b" backward, "o" other
    runs: list[list] = []
    for i in range(starts.size):
        cls = "c" if comm[i] else ("b" if bwd[i] else "o")
        if runs and cls != "c" and runs[-1][0] == cls:
            runs[-1][2] = i
        else:
            runs.append([cls, i, i])
    backward_runs = [r for r in runs if r[0] == "b"]
    candidates = []
    for j, (cls, a, b) in enumerate(runs):
        if cls != "o" or j + 1 >= len(runs):
            continue
        nxt_cls, nxt_a, _ = runs[j + 1]
        if nxt_cls == "b" or (nxt_cls == "c" and send[nxt_a]):
            busy = int((ends[a:b + 1] - starts[a:b + 1]).sum())
            candidates.append((busy, a, b))
    if len(candidates) > len(backward_runs):
        keep = sorted(candidates, key=lambda c: -c[0])[: len(backward_runs)]
        candidates = sorted(keep, key=lambda c: c[1])
    out = []
    for mb, (_, a, b) in enumerate(candidates):
        out.append((stage, "F", mb, tid, int(starts[a]), int(ends[a:b + 1].max()), "inferred",
                    None, None))
    for mb, (_, a, b) in enumerate(backward_runs):
        out.append((stage, "B", mb, tid, int(starts[a]), int(ends[a:b + 1].max()), "inferred",
                    None, None))
    return out
