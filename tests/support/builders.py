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
import random
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .synth import x

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

    def true_bubble(self, groups: list[list[int]] | None = None) -> dict[int, float]:
        """Per rank, the bubble of docs/metrics.md averaged over steps, counted on a 1 µs grid; with
        ``groups`` (the ranks of each pipeline replica) each group has its own step window."""
        out: dict[int, list[float]] = {}
        for step, by_rank in self.compute.items():
            for group in groups or [list(by_rank)]:
                ivs_of = {r: by_rank[r] for r in group}
                lo = min(s for iv in ivs_of.values() for s, _ in iv)
                hi = max(e for iv in ivs_of.values() for _, e in iv)
                for r, ivs in ivs_of.items():
                    grid = np.zeros(hi - lo, dtype=bool)
                    for s, e in ivs:
                        grid[s - lo:e - lo] = True
                    out.setdefault(r, []).append(1 - grid.sum() / (hi - lo))
        return {r: float(np.mean(v)) for r, v in out.items()}

    def replica_groups(self) -> list[list[int]]:
        """The ranks of each replica of a :func:`build_replicas` run."""
        P, dp, tp = self.extra["pp"], self.extra["dp"], self.extra["tp"]
        return [[(p * dp + d) * tp + t for p in range(P) for t in range(tp)] for d in range(dp)]


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


@dataclass
class Slot:
    """Where the independent scheduler put one action (µs)."""

    start: int  #: compute starts (its input has arrived and the rank is free)
    end: int  #: the action ends (its send, if any, takes the last µs)
    post: int  #: the rank reached the action: a recv is posted then
    dep_rank: int | None = None  #: rank of the producer when the input crosses ranks
    send_start: int | None = None  #: producer's send starts (its compute end)
    arrival: int | None = None  #: the input arrived


def place(orders, placement, dur, latency, host_delay, rendezvous=False) -> dict[tuple, Slot]:
    """Independent event-driven placement of every action.

    An action starts when its rank is free (+ ``host_delay``) and its input has arrived: a
    cross-rank input arrives ``latency`` µs after the producer's send µs (its last µs). With
    ``rendezvous`` (NCCL point-to-point), the transfer starts only once both sides are there:
    the send posted (producer's compute end) and the recv posted (the consumer reached the
    action), and takes ``latency + 1`` µs."""
    S = len(placement)
    done: dict[tuple, Slot] = {}
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
                post = free[r] + host_delay(r)
                ready, slot_extra = post, {}
                if dep is not None:
                    producer = done[dep]
                    if placement[dep[0]] != r:
                        send_start = producer.end - 1
                        arrival = (max(send_start, post) + latency + 1 if rendezvous
                                   else producer.end + latency)
                        slot_extra = {"dep_rank": placement[dep[0]], "send_start": send_start,
                                      "arrival": arrival}
                        ready = max(ready, arrival)
                    else:
                        ready = max(ready, producer.end)
                d = dur(s, k, m)
                done[(s, k, m)] = Slot(ready, ready + d, post, **slot_extra)
                free[r] = ready + d
                pos[r] += 1
                progress = True
    if any(p < len(o) for p, o in zip(pos, orders)):
        raise RuntimeError("deadlock in test builder")
    return done


def build_run(tmp: Path, orders, *, placement=None, dur=None, latency=0, steps=1, annotate=True,
              host_delay=None, gzip_files=False, step_gap=500, memory=False, world_size=None,
              with_profiler_steps=True, gpu=False, name="built", step_dur=None,
              rendezvous=False, realistic=False, split_marks=None, optimizer=None,
              batched_recvs=False, layers=1) -> BuiltRun:
    """Write one Kineto trace per rank for ``orders`` (per rank lists of (stage, kind, mb)).

    ``dur(stage, kind, mb)`` gives integer µs durations (default F=1000, B=2000, I=W=1000);
    ``latency`` µs separate an action from its consumer on another rank;
    ``host_delay(rank)`` µs pass before each of the rank's actions can start.
    ``step_dur(step, stage, kind, mb)``, when given, replaces ``dur`` so that
    durations can vary from step to step.
    A span whose input comes from another rank opens as soon as its rank is
    free, so the recv wait lies inside the span with no event (not compute).
    ``realistic`` (CPU traces): actions made of several top-level ops as torch runs them (a
    forward of five ops, the last stage's with its loss; a backward of six autograd-engine
    ops), the bookkeeping around them that is no action (``aten::ones_like`` before a
    backward on the last stage, ``aten::detach_`` before a backward's send), the batch split
    (``aten::tensor_split``) at the start of each step on the first and last stage
    (``split_marks``, default: ``realistic``) and the optimizer's annotated ops at each step's
    start and end (``optimizer``, default: ``realistic``). The truth compute is the
    forward's and backward's own ops.
    ``layers`` (with ``realistic``): a stage of that many blocks alike, op for op, so that
    each forward and each backward is one op sequence repeated ``layers`` times.
    ``batched_recvs``: a rank posts the recvs of consecutive actions of one kind together,
    before the first of them (so those actions follow each other with no op between).
    ``rendezvous``: point-to-point transfers start once both sides are there (see
    :func:`place`; :func:`build_gpu_run` traces always do).
    With ``gpu=True`` compute is a kernel on stream 7 launched (``cudaLaunchKernel``,
    same correlation id) when the span opens, and transfers are NCCL kernels on stream 20.
    """
    P = len(orders)
    placement = placement or list(range(P))
    dur = dur or (lambda s, k, m: {"F": 1000, "B": 2000, "I": 1000, "W": 1000}[k])
    host_delay = host_delay or (lambda r: 0)
    S = len(placement)
    split_marks = realistic if split_marks is None else split_marks
    optimizer = realistic if optimizer is None else optimizer
    directory = tmp / name
    directory.mkdir(parents=True, exist_ok=True)
    events: dict[int, list[dict]] = {r: [] for r in range(P)}
    compute: dict[int, dict[int, list[tuple[int, int]]]] = {}
    t0 = 1000
    for step in range(steps):
        step_d = dur if step_dur is None else (lambda s, k, m, _st=step: step_dur(_st, s, k, m))
        slots = place(orders, placement, step_d, latency, host_delay, rendezvous)
        placed = {act: (sl.start, sl.end) for act, sl in slots.items()}
        hi = max(e for _, e in placed.values())
        compute[step] = {r: [] for r in range(P)}
        for r in range(P):
            ev = events[r]
            if with_profiler_steps:
                ev.append(_x("ProfilerStep#%d" % (step + 1), "user_annotation", t0 - 50, hi + 100, r))
            holds = {s for s, rr in enumerate(placement) if rr == r}
            if split_marks and holds & {0, S - 1}:
                ev.append(_x("aten::tensor_split", "cpu_op", t0 - 30, 1, r))
            if optimizer:
                ev.append(_x("Optimizer.zero_grad#SGD.zero_grad", "user_annotation", t0 - 45, 3, r))
                ev.append(_x("aten::zero_", "cpu_op", t0 - 44, 1, r))
                ev.append(_x("Optimizer.step#SGD.step", "user_annotation", t0 + hi + 5, 40, r))
                for i in range(3):
                    ev.append(_x("aten::add_", "cpu_op", t0 + hi + 6 + 12 * i, 10, r))
            prev_end = 0
            prev_kind = None
            for (s, k, m) in orders[r]:
                a, b = placed[(s, k, m)]
                cross_in = (k == "F" and s > 0 and placement[s - 1] != r) or \
                    (k in "BI" and s < S - 1 and placement[s + 1] != r)
                span_start = min(a, prev_end + host_delay(r)) if cross_in else a
                if annotate:
                    ev.append(_x(f"PP:{s}{k}{m}", "user_annotation", t0 + span_start, b - span_start, r))
                posted = batched_recvs and prev_kind == k
                prev_kind = k
                if cross_in and not posted:
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
                elif realistic:
                    lo, hi_ = _realistic_ops(ev, r, t0, a, c1, k, last=(s == S - 1), first=(s == 0),
                                             sends=cross_out, layers=layers)
                    compute[step][r].append((t0 + lo, t0 + hi_))
                else:
                    ev.append(_x(name_, "cpu_op", t0 + a, c1 - a, r))
                    ev.append(_x("aten::t", "cpu_op", t0 + a + 1, max(1, (c1 - a) // 10), r))
                if gpu or not realistic:
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


FORWARD_OPS = ("aten::layer_norm", "aten::linear", "aten::gelu", "aten::linear", "aten::add")
BACKWARD_OPS = tuple("autograd::engine::evaluate_function: " + n for n in (
    "AddBackward0", "AddmmBackward0", "GeluBackward0", "AddmmBackward0",
    "NativeLayerNormBackward0", "torch::autograd::AccumulateGrad"))


def _realistic_ops(ev, r, t0, a, c1, kind, *, last, first, sends, layers=1) -> tuple[int, int]:
    """Write one action's ops in [a, c1) as torch runs them; return its own compute [lo, hi)."""
    lo, hi = a, c1
    if kind == "F":
        names = (() if first else ("aten::detach", "aten::requires_grad_")) + FORWARD_OPS * layers \
            + (("aten::mse_loss",) if last else ())
    else:
        names = BACKWARD_OPS * layers
        if last:  # torch.autograd.backward(loss) makes the loss's gradient first
            ev.append(_x("aten::ones_like", "cpu_op", t0 + a, 2, r))
            lo = a + 2
        if sends:  # the gradient to send is detached after the backward
            ev.append(_x("aten::detach_", "cpu_op", t0 + c1 - 2, 2, r))
            hi = c1 - 2
    n = len(names)
    bounds = [lo + (hi - lo) * i // n for i in range(n + 1)]
    for name_, x0, x1 in zip(names, bounds, bounds[1:]):
        ev.append(_x(name_, "cpu_op", t0 + x0, x1 - x0, r))
        if name_ == "aten::linear":
            ev.append(_x("aten::addmm", "cpu_op", t0 + x0, max(1, (x1 - x0) // 2), r))
    return lo, hi


def _x(name: str, cat: str, ts: int, dur: int, rank: int) -> dict:
    return x(name, ts, dur, cat=cat, pid=100 + rank, tid=100 + rank)


# ---------------------------------------------------------------- GPU traces

NCCL_NEW = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
NCCL_OLD = "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"
COMPUTE_STREAM, SIDE_STREAM, NCCL_STREAM = 7, 13, 20
#: Kineto moves "Stream Sync" events to a row of their own: tid = stream + this offset.
SYNC_TID_OFFSET = 1_000_000


def _consumers(orders, slots) -> dict[tuple, tuple[int, tuple]]:
    """Producer action -> (consumer rank, consumer action) for every cross-rank edge."""
    rank_of = {act: r for r, order in enumerate(orders) for act in order}
    out = {}
    for act, sl in slots.items():
        if sl.dep_rank is None:
            continue
        s, k, m = act
        if k == "F":
            prod = (s - 1, "F", m)
        else:
            prod = (s + 1, "I", m) if (s + 1, "I", m) in slots and rank_of.get((s + 1, "I", m)) == sl.dep_rank \
                else (s + 1, "B", m)
        out[prod] = (rank_of[act], act)
    return out


def build_gpu_run(tmp: Path, orders, *, placement=None, dur=None, latency=0, steps=1,
                  host_delay=None, name="built_gpu", p2p="runtime", nccl="new", p2p_args=True,
                  drop_launches=0.0, shuffle=False, hosts=None, clock_offset_us=None,
                  world_size=None, seed=0, with_profiler_steps=True, annotate=True) -> BuiltRun:
    """The GPU (Kineto kernel-level) trace of the run :func:`build_run` writes for the same
    arguments with ``rendezvous=True``: the same compute intervals, now kernels.

    What real GPU traces do, and these do too: the CPU runs about one action ahead of the
    GPU (launches long before their kernels); every host annotation has a
    ``gpu_user_annotation`` copy (same name and External id, 1 ns wider than the kernels it
    covers, on their stream); backward kernels are partly launched from the autograd thread
    (outside every host annotation's thread) and run on a second stream; P2P transfers are
    NCCL kernels on their own stream that cover the wait for the peer (a recv kernel starts
    when posted and ends when the data is in); "Stream Sync" events sit on the stream's
    tid + 1,000,000. ``p2p``: "runtime" wraps each send/recv in a ``PP:<stage>SEND_F<mb>``
    style span (torch's runtime schedules), "ops" leaves bare ``c10d::send``/``recv_`` ops.
    ``nccl``: "new" (``ncclDevKernel_*``) or "old" (``ncclKernel_*``) names. ``p2p_args``:
    kernels carry ``Src Rank``/``Dst Rank``/``Seq``. ``drop_launches``: share of main-thread
    compute launches left out (those kernels are found through the GPU copy). ``shuffle``:
    events in random order. ``hosts``: rank -> host name; ``clock_offset_us``: host ->
    µs its clock reads ahead of the true time (every event of its ranks is shifted).
    ``annotate=False``: torch's own ``Schedule1F1B`` on GPUs: no ``PP:`` span nor GPU copy,
    P2P as bare ops, a backward's kernels all launched from the autograd thread.

    ``extra["recv"]``: per rank, the truth of every recv kernel: (stage, kind, mb, start,
    end, waiting, transfer) in µs of true time.
    """
    import random

    P = len(orders)
    placement = placement or list(range(P))
    dur = dur or (lambda s, k, m: {"F": 1000, "B": 2000, "I": 1000, "W": 1000}[k])
    host_delay = host_delay or (lambda r: 0)
    S = len(placement)
    rng = random.Random(seed)
    kernel_name = NCCL_NEW if nccl == "new" else NCCL_OLD
    directory = tmp / name
    directory.mkdir(parents=True, exist_ok=True)
    events: dict[int, list[dict]] = {r: [] for r in range(P)}
    compute: dict[int, dict[int, list[tuple[int, int]]]] = {}
    recv_truth: dict[int, list[tuple]] = {r: [] for r in range(P)}
    ids = iter(range(10_000, 10**9))
    seq: dict[tuple[int, int], int] = {}
    t0 = 1000
    for step in range(steps):
        slots = place(orders, placement, dur, latency, host_delay, rendezvous=True)
        consumers = _consumers(orders, slots)
        hi = max(sl.end for sl in slots.values())
        compute[step] = {r: [] for r in range(P)}
        for r in range(P):
            ev = events[r]
            main, autograd = 100 + r, 900 + r
            dev = r % 8

            def cpu(name_, cat, ts, d, tid=main, **args):
                e = {"ph": "X", "cat": cat, "name": name_, "pid": 100 + r, "tid": tid, "ts": ts, "dur": d}
                if args:
                    e["args"] = args
                ev.append(e)

            def gpu(name_, cat, ts, d, stream, **args):
                ev.append({"ph": "X", "cat": cat, "name": name_, "pid": dev, "tid": stream, "ts": ts,
                           "dur": d, "args": {"device": dev, "stream": stream, **args}})

            def launch(ts, tid=main, keep=True):
                corr = next(ids)
                if keep:
                    cpu("cudaLaunchKernel", "cuda_runtime", ts, 1, tid, correlation=corr)
                return corr

            def annotated(name_, ts, d):
                ext = next(ids)
                cpu(name_, "user_annotation", ts, d, **{"External id": ext})
                return ext

            def copy(name_, ext, lo, hi_, stream):
                gpu(name_, "gpu_user_annotation", round(t0 + lo - 0.001, 3), round(hi_ - lo + 0.002, 3),
                    stream, **{"External id": ext})

            step_cpu = t0 - 40
            cursor, prev_gpu = step_cpu, None
            for (s, k, m) in orders[r]:
                sl = slots[(s, k, m)]
                a, b = sl.start, sl.end
                cross_out = (s, k, m) in consumers
                c1 = b - 1 if cross_out else b
                L = cursor if prev_gpu is None else max(cursor, t0 + prev_gpu)
                direction = "F" if k == "F" else "B"
                if sl.dep_rank is not None:  # recv kernel: posted when the rank gets here
                    name_ = f"PP:{s}RECV_{direction}{m}"
                    ext = annotated(name_, L, 4) if p2p == "runtime" and annotate else None
                    cpu("c10d::recv_", "cpu_op", L + 1, 3)
                    corr = launch(L + 2)
                    key = (sl.dep_rank, r)
                    seq[key] = seq.get(key, 0) + 1
                    args = {"correlation": corr}
                    if p2p_args:
                        args.update({"Collective name": "recv", "Src Rank": sl.dep_rank, "Seq": seq[key]})
                    assert L + 2 < t0 + sl.post, "launch after its kernel"
                    gpu(kernel_name, "kernel", t0 + sl.post, sl.arrival - sl.post, NCCL_STREAM, **args)
                    if ext is not None:
                        copy(name_, ext, sl.post, sl.arrival, NCCL_STREAM)
                    waiting = min(max(sl.send_start - sl.post, 0), sl.arrival - sl.post)
                    recv_truth[r].append((s, k, m, t0 + sl.post, t0 + sl.arrival, waiting,
                                          sl.arrival - sl.post - waiting))
                ext = annotated(f"PP:{s}{k}{m}", L + 5, 15) if annotate else None
                if annotate or k == "F":
                    cpu("aten::mm" if k == "F" else "aten::ones_like", "cpu_op", L + 6, 3)
                    keep = rng.random() >= drop_launches
                    corr1 = launch(L + 7, keep=keep)
                else:  # the autograd engine launches the whole backward from its thread
                    cpu("autograd::engine::evaluate_function: AddBackward0", "cpu_op", L + 6, 3,
                        autograd)
                    corr1 = launch(L + 7, autograd)
                assert L + 7 < t0 + a, "launch after its kernel"
                if k == "F":
                    gpu("sm90_xmma_gemm_f16f16_tn", "kernel", t0 + a, c1 - a, COMPUTE_STREAM, correlation=corr1)
                    if ext is not None:
                        copy(f"PP:{s}{k}{m}", ext, a, c1, COMPUTE_STREAM)
                else:
                    mid = a + (c1 - a) // 2
                    gpu("elementwise_kernel", "kernel", t0 + a, mid - a, COMPUTE_STREAM, correlation=corr1)
                    if ext is not None:
                        copy(f"PP:{s}{k}{m}", ext, a, mid, COMPUTE_STREAM)
                    cpu("autograd::engine::evaluate_function: MmBackward0", "cpu_op", L + 10, 4, autograd)
                    corr2 = launch(L + 11, autograd)
                    gpu("sm90_xmma_gemm_f16f16_nt", "kernel", t0 + mid, c1 - mid, SIDE_STREAM, correlation=corr2)
                gpu("Stream Sync", "cuda_sync", t0 + c1, 1, COMPUTE_STREAM + SYNC_TID_OFFSET)
                compute[step][r].append((t0 + a, t0 + c1))
                if cross_out:
                    dst_rank, dst_act = consumers[(s, k, m)]
                    arrival = slots[dst_act].arrival
                    name_ = f"PP:{s}SEND_{direction}{m}"
                    ext = annotated(name_, L + 21, 4) if p2p == "runtime" and annotate else None
                    cpu("c10d::send", "cpu_op", L + 22, 2)
                    corr = launch(L + 23)
                    key = (r, dst_rank)
                    seq[key] = seq.get(key, 0) + 1
                    args = {"correlation": corr}
                    if p2p_args:
                        args.update({"Collective name": "send", "Dst Rank": dst_rank, "Seq": seq[key]})
                    gpu(kernel_name, "kernel", t0 + c1, arrival - c1, NCCL_STREAM, **args)
                    if ext is not None:
                        copy(name_, ext, c1, arrival, NCCL_STREAM)
                cursor, prev_gpu = L + 26, a
            if with_profiler_steps:
                cpu(f"ProfilerStep#{step + 1}", "user_annotation", step_cpu - 10, max(t0 + hi, cursor) + 100 - step_cpu)
        t0 += hi + 500
    files = []
    for r in range(P):
        ev = events[r]
        host = (hosts or {}).get(r)
        shift = (clock_offset_us or {}).get(host, 0)
        if shift:
            for e in ev:
                e["ts"] = round(e["ts"] + shift, 3)
        if shuffle:
            rng.shuffle(ev)
        doc = {
            "schemaVersion": 1,
            "deviceProperties": [{"id": r % 8, "name": "NVIDIA H100"}],
            "distributedInfo": {"backend": "nccl", "rank": r, "world_size": world_size or P},
            "baseTimeNanoseconds": BASE_NS,
            "traceEvents": ev,
        }
        if host is not None:
            doc["host_name"] = host
        path = directory / f"rank{r}.json"
        path.write_bytes(json.dumps(doc).encode())
        files.append(path)
    return BuiltRun(directory, files, compute, [list(o) for o in orders], list(placement),
                    extra={"recv": recv_truth})


# ---------------------------------------------------------------- pipeline replicas

def mesh_pg_config(pp: int, dp: int, tp: int = 1) -> list[dict]:
    """``distributedInfo.pg_config`` as a DeviceMesh ("pp", "dp", "tp"), pp outermost, writes it."""
    world = pp * dp * tp

    def rank(p, d, t):
        return (p * dp + d) * tp + t

    groups = [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cpu:gloo",
               "pg_size": world, "ranks": list(range(world))}]
    n = 1
    for d in range(dp):
        for t in range(tp):
            groups.append({"pg_name": str(n), "pg_desc": "mesh_pp", "pg_size": pp,
                           "ranks": [rank(p, d, t) for p in range(pp)]})
            n += 1
    for p in range(pp):
        for t in range(tp):
            groups.append({"pg_name": str(n), "pg_desc": "mesh_dp", "pg_size": dp,
                           "ranks": [rank(p, d, t) for d in range(dp)]})
            n += 1
    if tp > 1:
        for p in range(pp):
            for d in range(dp):
                groups.append({"pg_name": str(n), "pg_desc": "mesh_tp", "pg_size": tp,
                               "ranks": [rank(p, d, t) for t in range(tp)]})
                n += 1
    return groups


def build_replicas(tmp: Path, orders, *, dp: int, tp: int = 1, dur_of=None, steps: int = 2,
                   latency: int = 0, allreduce_us: int = 300, pg_config: bool = True,
                   name: str = "replicas", **kw) -> BuiltRun:
    """D data-parallel replicas (× T tensor-parallel peers per stage) of one pipeline,
    relabelled as a DeviceMesh ("pp", "dp", "tp") with pp outermost lays ranks out.

    ``dur_of(replica, tp_index)`` gives each copy its own ``dur(stage, kind, mb)`` (a slower
    replica, a straggler rank). After each step's last backward every rank all-reduces its
    gradients with its data-parallel peers (``c10d::allreduce_`` + ``gloo:all_reduce``): the
    all-reduce starts when the rank's last compute ends and ends ``allreduce_us`` after the
    last of its peers started, so waiting for the slowest replica is part of it. ``extra``:
    ``replica_truth[(d, t)]``: the copy's own BuiltRun (ranks numbered within it) and
    ``allreduce[rank]``: per step (start, end, waiting) in µs."""
    P = len(orders)
    world = P * dp * tp

    def rank(p, d, t):
        return (p * dp + d) * tp + t

    copies = {}
    for d in range(dp):
        for t in range(tp):
            copies[(d, t)] = build_run(tmp / f"_{name}_{d}_{t}", orders, steps=steps, latency=latency,
                                       dur=dur_of(d, t) if dur_of else None, name="run", **kw)
    directory = tmp / name
    directory.mkdir(parents=True, exist_ok=True)
    docs = {}
    for (d, t), built in copies.items():
        for p, f in enumerate(built.files):
            doc = json.loads(gzip.decompress(f.read_bytes()) if f.name.endswith(".gz") else f.read_bytes())
            g = rank(p, d, t)
            doc["distributedInfo"].update({"rank": g, "world_size": world})
            if pg_config:
                doc["distributedInfo"]["pg_config"] = mesh_pg_config(P, dp, tp)
            for e in doc["traceEvents"]:
                if "pid" in e:
                    e["pid"] = 100 + g
                    e["tid"] = 100 + g
            docs[g] = doc
    allreduce: dict[int, list[tuple[int, int, int]]] = {r: [] for r in range(world)}
    for step in range(steps):
        for p in range(P):
            for t in range(tp):
                ends = {d: max(e for _, e in copies[(d, t)].compute[step][p]) for d in range(dp)}
                last = max(ends.values())
                for d in range(dp):
                    g = rank(p, d, t)
                    start, end = ends[d] + 2, last + 2 + allreduce_us
                    docs[g]["traceEvents"] += [
                        _x("c10d::allreduce_", "cpu_op", start, 3, g),
                        _x("gloo:all_reduce", "user_annotation", start, end - start, g)]
                    allreduce[g].append((start, end, last - ends[d]))
    files = []
    for g in range(world):
        path = directory / f"rank{g}.json"
        path.write_bytes(json.dumps(docs[g]).encode())
        files.append(path)
    compute = {step: {rank(p, d, t): copies[(d, t)].compute[step][p] for (d, t) in copies
                      for p in range(P)} for step in range(steps)}
    return BuiltRun(directory, files, compute, [list(o) for o in orders], list(range(P)),
                    extra={"replica_truth": copies, "allreduce": allreduce, "pp": P, "dp": dp, "tp": tp})


def build_single_process_run(tmp: Path, orders, *, dur=None, latency=0, steps=2, annotate=True,
                             name="single") -> BuiltRun:
    """One process, stage s on ``cuda:s``: one trace of the run :func:`build_run` places for
    ``orders`` (device s standing in for rank s). The host issues every action in the order
    the devices start them, ahead of them (launches are asynchronous): ``PP:<s><k><m>`` spans
    (``annotate``) around the launches; forward kernels are launched from the main thread,
    backward kernels from the autograd thread; activations cross devices as a peer-to-peer
    memcpy on the receiving device. ``compute`` is keyed by device."""
    P = len(orders)
    dur = dur or (lambda s, k, m: {"F": 1000, "B": 2000, "I": 1000, "W": 1000}[k])
    directory = tmp / name
    directory.mkdir(parents=True, exist_ok=True)
    ev: list[dict] = []
    compute: dict[int, dict[int, list[tuple[int, int]]]] = {}
    ids = iter(range(5000, 10**9))
    t0 = 1000
    for step in range(steps):
        slots = place(orders, list(range(P)), dur, latency, lambda r: 0)
        hi = max(sl.end for sl in slots.values())
        compute[step] = {d: [] for d in range(P)}
        acts = sorted(slots, key=lambda a: (slots[a].start, a[0]))
        cursor = t0 - 40
        for (s, k, m) in acts:
            sl = slots[(s, k, m)]
            a, c1 = sl.start, sl.end
            L = cursor
            assert L + 12 < t0 + a, "host behind the device in the built run"
            if annotate:
                ev.append(x(f"PP:{s}{k}{m}", L, 20, cat="user_annotation", pid=1, tid=1,
                            external_id=next(ids)))
            tid = 1 if k == "F" else 2  # the autograd engine's device thread launches backward
            ev.append(x("aten::mm" if k == "F" else "autograd::engine::evaluate_function: MmBackward0",
                        L + 2, 6, pid=1, tid=tid))
            corr = next(ids)
            ev.append(x("cudaLaunchKernel", L + 3, 1, cat="cuda_runtime", pid=1, tid=tid,
                        correlation=corr))
            ev.append({"ph": "X", "cat": "kernel", "name": "sm80_gemm", "pid": s, "tid": 7,
                       "ts": t0 + a, "dur": c1 - a, "args": {"correlation": corr, "device": s,
                                                             "stream": 7}})
            if sl.dep_rank is not None and latency:
                ev.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy PtoP (Device -> Device)",
                           "pid": s, "tid": 9, "ts": t0 + sl.arrival - latency, "dur": latency,
                           "args": {"device": s, "stream": 9}})
            compute[step][s].append((t0 + a, t0 + c1))
            cursor = L + 30
        ev.append(x(f"ProfilerStep#{step}", t0 - 50, hi + 100, cat="user_annotation", pid=1, tid=1))
        t0 += hi + 500
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": d, "name": "NVIDIA A100"} for d in range(P)],
           "baseTimeNanoseconds": BASE_NS, "traceEvents": ev}
    path = directory / "trace.json"
    path.write_bytes(json.dumps(doc).encode())
    return BuiltRun(directory, [path], compute, [list(o) for o in orders], list(range(P)))


def build_one_device_run(tmp: Path, issue_order, *, dur, host_us, steps=2, gpu=True,
                         shuffle_seed: int | None = None, name="one_device") -> BuiltRun:
    """One process whose P stages take turns on one device: the host issues ``issue_order``
    (``(stage, kind, mb)`` in program order), spending ``host_us(i)`` before the i-th action.

    On the GPU (``gpu``) each action is one kernel on device 0, stream 7, launched at the end
    of its ``PP:`` span and started when both the launch and the previous kernel are done: a
    host slower than the kernels leaves the device idle. On the CPU the action's op runs on
    the host thread itself. ``compute`` is keyed by stage (each stage is a rank of the report);
    ``shuffle_seed`` writes the events in a shuffled order (same content)."""
    ev: list[dict] = []
    compute: dict[int, dict[int, list[tuple[int, int]]]] = {}
    ids = iter(range(5000, 10**9))
    stages = sorted({s for s, _, _ in issue_order})
    t0 = 1000
    for step in range(steps):
        host, device_free = t0, t0
        compute[step] = {s: [] for s in stages}
        first = None
        for i, (s, k, m) in enumerate(issue_order):
            host += host_us(i)
            d = dur(s, k, m)
            if gpu:
                ev.append(x(f"PP:{s}{k}{m}", host, 6, cat="user_annotation", pid=1, tid=1,
                            external_id=next(ids)))
                corr = next(ids)
                ev.append(x("aten::mm", host + 1, 4, pid=1, tid=1))
                ev.append(x("cudaLaunchKernel", host + 2, 2, cat="cuda_runtime", pid=1, tid=1,
                            correlation=corr))
                start = max(device_free, host + 4)
                ev.append({"ph": "X", "cat": "kernel", "name": "sm90_gemm", "pid": 0, "tid": 7,
                           "ts": start, "dur": d, "args": {"correlation": corr, "device": 0,
                                                           "stream": 7}})
                host += 6
            else:
                start = host
                ev.append(x(f"PP:{s}{k}{m}", start, d, cat="user_annotation", pid=1, tid=1))
                ev.append(x("aten::mm", start, d, pid=1, tid=1))
                host += d
            device_free = start + d
            first = start if first is None else first
            compute[step][s].append((start, start + d))
        end = max(device_free, host)
        ev.append(x(f"ProfilerStep#{step}", t0 - 5, end - t0 + 10, cat="user_annotation",
                    pid=1, tid=1))
        t0 = end + 500
    if shuffle_seed is not None:
        random.Random(shuffle_seed).shuffle(ev)
    doc: dict = {"schemaVersion": 1, "baseTimeNanoseconds": BASE_NS, "traceEvents": ev}
    if gpu:
        doc["deviceProperties"] = [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}]
    directory = tmp / name
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "rank0.json"
    path.write_bytes(json.dumps(doc).encode())
    orders = [[a for a in issue_order if a[0] == s] for s in stages]
    return BuiltRun(directory, [path], compute, orders, list(range(len(stages))))
