"""Build Kineto-format traces with a known answer, for tests.

A built run places each rank's actions with a tiny independent scheduler
(not pipeaudit's replay): an action starts when its rank is free and its input
has arrived (+ latency when it crosses ranks). Each action is written as a
``PP:<stage><kind><mb>`` span (or, with ``annotate=False``, bare ops) holding
an optional wait with no events (the recv wait) followed by its compute ops
(a top-level ``aten::mm`` with a nested child). Point-to-point ops and gloo
lifetime spans surround them as torch writes them. The exact compute
intervals are returned so tests can compute the truth on an integer grid.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from synth import x

BASE_NS = 1_790_000_000_000_000_000


@dataclass
class BuiltRun:
    """A run written to disk and the truth about it."""

    directory: Path
    files: list[Path]
    compute: dict[int, dict[int, list[tuple[int, int]]]]  # step -> rank -> [(start_us, end_us)]
    orders: list[list[tuple[int, str, int]]]
    placement: list[int]
    extra: dict = field(default_factory=dict)

    def true_bubble(self) -> dict[int, float]:
        """Per rank, the DESIGN.md bubble averaged over steps, counted on a 1 µs grid."""
        out: dict[int, list[float]] = {}
        for step, by_rank in self.compute.items():
            lo = min(s for iv in by_rank.values() for s, _ in iv)
            hi = max(e for iv in by_rank.values() for _, e in iv)
            for r, ivs in by_rank.items():
                grid = np.zeros(hi - lo, dtype=bool)
                for s, e in ivs:
                    grid[s - lo:e - lo] = True
                out.setdefault(r, []).append(1 - grid.sum() / (hi - lo))
        return {r: float(np.mean(v)) for r, v in out.items()}


def gpipe_orders(P: int, M: int) -> list[list[tuple[int, str, int]]]:
    return [[(r, "F", m) for m in range(M)] + [(r, "B", m) for m in range(M)] for r in range(P)]


def one_f_one_b_orders(P: int, M: int) -> list[list[tuple[int, str, int]]]:
    out = []
    for r in range(P):
        warm = min(P - r - 1, M)
        order = [(r, "F", m) for m in range(warm)]
        f, b = warm, 0
        while b < M:
            if f < M:
                order.append((r, "F", f))
                f += 1
            order.append((r, "B", b))
            b += 1
        out.append(order)
    return out


def _place(orders, placement, dur, latency, host_delay):
    """Independent event-driven placement: returns {(stage,kind,mb): (start, end)} in µs."""
    S = len(placement)
    done: dict[tuple, tuple[int, int]] = {}
    pos = [0] * len(orders)
    free = [0] * len(orders)
    progress = True
    while progress:
        progress = False
        for r, order in enumerate(orders):
            while pos[r] < len(order):
                s, k, m = order[pos[r]]
                if k == "F":
                    dep = (s - 1, "F", m) if s > 0 else None
                elif k == "W":
                    dep = (s, "I", m)
                elif s < S - 1:
                    dep = (s + 1, "I", m) if (s + 1, "I", m) in done else (s + 1, "B", m)
                else:
                    dep = (s, "F", m)
                if dep is not None and dep not in done:
                    break
                ready = free[r] + host_delay(r)
                if dep is not None:
                    cross = placement[dep[0]] != r
                    ready = max(ready, done[dep][1] + (latency if cross else 0))
                d = dur(s, k, m)
                done[(s, k, m)] = (ready, ready + d)
                free[r] = ready + d
                pos[r] += 1
                progress = True
    if any(p < len(o) for p, o in zip(pos, orders)):
        raise RuntimeError("deadlock in test builder")
    return done


def build_run(tmp: Path, orders, *, placement=None, dur=None, latency=0, steps=1, annotate=True,
              host_delay=None, gzip_files=False, step_gap=500, memory=False, world_size=None,
              with_profiler_steps=True, gpu=False, name="built", step_dur=None) -> BuiltRun:
    """Write one Kineto trace per rank for ``orders`` (per rank lists of (stage, kind, mb)).

    ``dur(stage, kind, mb)`` gives integer µs durations (default F=1000, B=2000, I=W=1000);
    ``latency`` µs separate an action from its consumer on another rank;
    ``host_delay(rank)`` µs pass before each of the rank's actions can start.
    ``step_dur(step, stage, kind, mb)``, when given, replaces ``dur`` so that
    durations can vary from step to step.
    A span whose input comes from another rank opens as soon as its rank is
    free, so the recv wait lies inside the span with no event (not compute).
    With ``gpu=True`` compute is a kernel on stream 7 launched (``cudaLaunchKernel``,
    same correlation id) when the span opens, and transfers are NCCL kernels on stream 20.
    """
    P = len(orders)
    placement = placement or list(range(P))
    dur = dur or (lambda s, k, m: {"F": 1000, "B": 2000, "I": 1000, "W": 1000}[k])
    host_delay = host_delay or (lambda r: 0)
    S = len(placement)
    directory = tmp / name
    directory.mkdir(parents=True, exist_ok=True)
    events: dict[int, list[dict]] = {r: [] for r in range(P)}
    compute: dict[int, dict[int, list[tuple[int, int]]]] = {}
    t0 = 1000
    for step in range(steps):
        step_d = dur if step_dur is None else (lambda s, k, m, _st=step: step_dur(_st, s, k, m))
        placed = _place(orders, placement, step_d, latency, host_delay)
        hi = max(e for _, e in placed.values())
        compute[step] = {r: [] for r in range(P)}
        for r in range(P):
            ev = events[r]
            if with_profiler_steps:
                ev.append(_x("ProfilerStep#%d" % (step + 1), "user_annotation", t0 - 50, hi + 100, r))
            prev_end = 0
            for (s, k, m) in orders[r]:
                a, b = placed[(s, k, m)]
                cross_in = (k == "F" and s > 0 and placement[s - 1] != r) or \
                    (k in "BI" and s < S - 1 and placement[s + 1] != r)
                span_start = min(a, prev_end + host_delay(r)) if cross_in else a
                if annotate:
                    ev.append(_x(f"PP:{s}{k}{m}", "user_annotation", t0 + span_start, b - span_start, r))
                if cross_in:
                    ev.append(_x("c10d::recv_", "cpu_op", t0 + span_start, min(1, a - span_start), r))
                    ev.append(_x("gloo:recv", "user_annotation", t0 + span_start, max(a - span_start, 1), r))
                cross_out = (k == "F" and s < S - 1 and placement[s + 1] != r) or \
                    (k in "BI" and s > 0 and placement[s - 1] != r)
                c1 = b - 1 if cross_out else b  # the send takes the action's last µs
                name_ = "autograd::engine::evaluate_function: MmBackward0" if k != "F" else "aten::mm"
                if gpu:
                    corr = len(ev) + 1
                    ev.append(_x(name_, "cpu_op", t0 + span_start, 3, r))
                    ev.append(dict(_x("cudaLaunchKernel", "cuda_runtime", t0 + span_start + 1, 1, r),
                                   args={"correlation": corr}))
                    ev.append({"ph": "X", "name": "sm90_gemm_kernel", "cat": "kernel", "ts": t0 + a,
                               "dur": c1 - a, "pid": 0, "tid": 7,
                               "args": {"correlation": corr, "stream": 7, "device": 0}})
                    if cross_in and a > span_start:
                        ev.append({"ph": "X", "name": "ncclDevKernel_SendRecv", "cat": "kernel",
                                   "ts": t0 + span_start, "dur": a - span_start, "pid": 0, "tid": 20,
                                   "args": {"stream": 20, "device": 0}})
                else:
                    ev.append(_x(name_, "cpu_op", t0 + a, c1 - a, r))
                    ev.append(_x("aten::t", "cpu_op", t0 + a + 1, max(1, (c1 - a) // 10), r))
                compute[step][r].append((t0 + a, t0 + c1))
                if cross_out and gpu:
                    ev.append({"ph": "X", "name": "ncclDevKernel_SendRecv", "cat": "kernel",
                               "ts": t0 + c1, "dur": max(latency, 1), "pid": 0, "tid": 20,
                               "args": {"stream": 20, "device": 0}})
                elif cross_out:
                    # the send op ends the action; the gloo lifetime span outlives it
                    ev.append(_x("c10d::send", "cpu_op", t0 + c1, 1, r))
                    ev.append(_x("gloo:send", "user_annotation", t0 + c1, max(latency, 1), r))
                prev_end = b
            if memory:
                for i, (cs, _) in enumerate(compute[step][r]):
                    ev.append({"ph": "i", "name": "[memory]", "pid": 100 + r, "tid": 1, "ts": cs,
                               "s": "t", "args": {"Total Allocated": (r + 1) * 1_000_000 + i * 1000,
                                                  "Device Id": -1, "Device Type": 0, "Bytes": 1000}})
        t0 += hi + step_gap
    files = []
    for r in range(P):
        doc = {
            "schemaVersion": 1,
            **({"deviceProperties": [{"id": 0, "name": "NVIDIA H100"}]} if gpu else {}),
            "distributedInfo": {"backend": "gloo", "rank": r, "world_size": world_size or P},
            "baseTimeNanoseconds": BASE_NS,
            "traceEvents": events[r],
        }
        path = directory / (f"rank{r}.json.gz" if gzip_files else f"rank{r}.json")
        raw = json.dumps(doc).encode()
        path.write_bytes(gzip.compress(raw) if gzip_files else raw)
        files.append(path)
    return BuiltRun(directory, files, compute, [list(o) for o in orders], list(placement))


def _x(name: str, cat: str, ts: int, dur: int, rank: int) -> dict:
    return x(name, ts, dur, cat=cat, pid=100 + rank, tid=100 + rank)
