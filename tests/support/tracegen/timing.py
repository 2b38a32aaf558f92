"""Dependency-driven execution of a case: every rank runs its program; an action starts when
its rank is free and its input has arrived (F(s, m) after F(s-1, m)'s send plus the latency,
B/I(s, m) after B/I(s+1, m)'s, W after I by the rank's own order). The result is each rank's
events (neutral records that emit.py writes as Kineto JSON) and each rank's compute intervals
per step, from which truth.py computes the figures of docs/metrics.md.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from tests.support.tracegen.case import Case
from tests.support.tracegen.orders import Item, placement, programs
from tests.support.tracegen.shapes import SEED, Op, StageOps, stage_ops


@dataclass
class Ev:
    """A trace event: name, category, start and duration (µs), thread ("main", "autograd",
    "compute" / "nccl" streams), args."""

    name: str
    cat: str
    ts: float
    dur: float
    thread: str = "main"
    args: dict | None = None


@dataclass
class RankRun:
    """One rank's trace events and, per step, its compute intervals (the truth's C)."""

    rank: int
    position: int  #: stage position in its pipeline (rank index in the pipeline group)
    replica: int
    events: list[Ev] = field(default_factory=list)
    compute: dict[int, list[tuple[float, float]]] = field(default_factory=dict)
    #: stage, kind, microbatch, step, compute (µs: the union of its compute), its first compute
    #: start and last compute end (None without compute: the first stage's I)
    actions: list[tuple] = field(default_factory=list)


class Deadlock(RuntimeError):
    """The programs wait on each other (a generator bug: torch's orders never do)."""


def grid_rank(case: Case, replica: int, position: int, t: int) -> int:
    """Global rank of (replica, stage position, TP index) in the case's grid order."""
    if case.grid == "pp-outer":
        return (position * case.dp + replica) * case.tp + t
    return (replica * case.pp + position) * case.tp + t


def _blocking(prog: tuple[Item, ...]) -> list[Item]:
    """Move every receive right before the action that consumes it (a blocking receive)."""
    recvs = [it for it in prog if it.op == "R"]
    out: list[Item] = []
    for it in prog:
        if it.op == "R":
            continue
        if it.op == "C":
            for r in recvs:
                st, kind, mb = r.key
                if any(a.stage == st and a.mb == mb and (a.kind == "F") == (kind == "F")
                       and a.kind != "W" for a in it.acts):
                    out.append(r)
        out.append(it)
    return out


class _Rank:
    """The state of one rank while the pipeline runs."""

    def __init__(self, case: Case, run: RankRun, prog: list[tuple[int, Item | str]],
                 ops: list[StageOps], rng: random.Random, t0: float) -> None:
        self.case, self.run, self.prog, self.ops, self.rng = case, run, prog, ops, rng
        self.i = 0
        self.t = t0
        self.step_start = t0
        self.jitter = case.op_shape in ("distinct", "repeated", "dominant")
        self.span: tuple[str, float] | None = None  # an open torch "Forward i" span (GPipe)
        #: receives posted and not yet waited for: key -> their lifetime span (gloo:recv)
        self.posted: dict[tuple, Ev] = {}
        #: GPU trace: the compute stream's clock, the earliest start of the next kernel (an
        #: input's arrival), how far the host may run ahead of the stream, correlation ids
        self.gpu = case.p2p == "nccl"
        self.g = t0
        self.ready = 0.0
        self.lead = rng.uniform(50.0, 2000.0)
        self.corr = 0
        #: NCCL batches: a received key -> every received key of its batch (one kernel)
        self.batch_of: dict[tuple, tuple] = {}
        self.batch: list | None = None  # the open batch: [kernel start, send end, recv keys]

    def launch(self, t: float, d: float, thread: str) -> int:
        """A cudaLaunchKernel on the host at [t, t + d]; returns its correlation id."""
        self.corr += 1
        self.run.events.append(Ev("cudaLaunchKernel", "cuda_runtime", t, d, thread,
                                  {"correlation": self.corr, "External id": self.corr}))
        return self.corr

    def _gpu_op(self, op: Op, d: float, step: int | None, thread: str) -> None:
        """A host op that launches one kernel on the compute stream (the kernel is the work)."""
        hd = min(d * 0.5, self.rng.uniform(8.0, 25.0))
        self.run.events.append(Ev(op.name, "cpu_op", self.t, hd, thread))
        for name, a, b in op.children:
            self.run.events.append(Ev(name, "cpu_op", self.t + a * hd, b * hd, thread))
        kernel = step is not None or op.name in ("aten::div_", "aten::add_")
        if kernel:
            c = self.launch(self.t + hd * 0.5, hd * 0.3, thread)
            ks = max(self.g, self.t + hd * 0.8 + 4.0, self.ready)
            self.run.events.append(Ev(_kernel_name(op.name), "kernel", ks, d, "compute",
                                      {"stream": 7, "device": 0, "correlation": c,
                                       "External id": c}))
            self.g = ks + d
            if step is not None:
                self.run.compute.setdefault(step, []).append((ks, ks + d))
        self.t += hd + self.gap()

    def catch_up(self) -> None:
        """The host runs at most ``lead`` ahead of the stream (it blocks when further)."""
        if self.gpu:
            self.t = max(self.t, self.g - self.lead)

    def gap(self) -> float:
        return self.rng.uniform(2.0, 10.0)

    def op(self, op: Op, step: int | None, scale: float = 1.0, thread: str = "main") -> None:
        """Run one op at the rank's clock; ``step`` not None: it is compute of that step."""
        d = op.dur * scale * (self.rng.uniform(0.9, 1.1) if self.jitter else 1.0)
        if self.gpu:
            self._gpu_op(op, d, step, thread)
            return
        self.run.events.append(Ev(op.name, "cpu_op", self.t, d, thread))
        for name, a, b in op.children:
            self.run.events.append(Ev(name, "cpu_op", self.t + a * d, b * d, thread))
        if step is not None:
            self.run.compute.setdefault(step, []).append((self.t, self.t + d))
        self.t += d + self.gap()

    def annotation(self, name: str, start: float, end: float | None = None) -> None:
        self.run.events.append(Ev(name, "user_annotation", start, (end or self.t) - start))


def simulate(case: Case) -> list[RankRun]:
    """Run every pipeline replica of the case; returns one RankRun per global rank."""
    rng = random.Random(case.seed)
    pp, v, m = case.pp, case.v, case.m
    n_stages = 2 * pp if case.schedule in ("zbv", "dualpipev") else pp * v
    place = placement(case.schedule, pp, v)
    local = {r: sorted(s for s in range(n_stages) if place[s] == r) for r in range(pp)}
    heavy: dict[int, float] = {}
    layers: dict[int, int] = {s: case.layers for s in range(n_stages)}
    targets = []
    if case.heavy_stage is not None:
        targets.append(case.heavy_stage)
    if case.heavy_chunk is not None:
        targets += [local[r][case.heavy_chunk] for r in range(pp)]
    for s in targets:
        if case.heavy_by_layers:
            layers[s] = max(1, round(case.layers * case.heavy_factor))
        else:
            heavy[s] = case.heavy_factor
    ops = stage_ops(rng, n_stages, case.op_shape, case.nested, case.loss, case.data_load,
                    heavy, layers)
    progs = programs(case.schedule, pp, v, m)
    runs: list[RankRun] = []
    for replica in range(case.dp):
        for t in range(case.tp):
            runs += _run_pipeline(case, replica, t, progs, ops, local, n_stages, rng)
    return runs


def _run_pipeline(case: Case, replica: int, tpi: int, progs, ops, local, n_stages,
                  rng: random.Random) -> list[RankRun]:
    pp = case.pp
    ranks: list[_Rank] = []
    for pos in range(pp):
        blocking = case.p2p == "gloo" and not case.batched
        prog = _blocking(progs[pos]) if blocking else list(progs[pos])
        flat: list[tuple[int, Item | str]] = []
        for k in range(case.steps):
            flat.append((k, "START"))
            flat += [(k, it) for it in prog]
            flat.append((k, "END"))
        run = RankRun(grid_rank(case, replica, pos, tpi), pos, replica)
        ranks.append(_Rank(case, run, flat, ops, random.Random(rng.random()),
                           1000.0 + rng.uniform(0, 200)))
    desched = _deschedule_target(case, ranks, rng)
    arrival: dict[tuple, float] = {}
    holds = {pos: local[pos] for pos in range(pp)}
    while True:
        progress = False
        for rk in ranks:
            while rk.i < len(rk.prog):
                if not _advance(rk, arrival, holds[rk.run.position], n_stages, desched):
                    break
                progress = True
        if all(rk.i >= len(rk.prog) for rk in ranks):
            return [rk.run for rk in ranks]
        if not progress:
            raise Deadlock(f"{case.describe()}: ranks wait on each other")


def _deschedule_target(case: Case, ranks: list[_Rank], rng: random.Random):
    """(position, program index) of the item whose first op runs 100x long, or None."""
    if case.deschedule is None:
        return None
    pos = rng.randrange(case.pp)
    kind = "C" if case.deschedule == "compute" else "S"
    idx = [i for i, (_, it) in enumerate(ranks[pos].prog)
           if isinstance(it, Item) and it.op == kind and (kind == "C" or it.key[1] == "F")]
    if not idx:
        return None
    return pos, rng.choice(idx)


def _action_ops(rk: _Rank, stage: int, kind: str, n_stages: int) -> list[Op]:
    so = rk.ops[stage]
    if kind == "F":
        return list(so.fwd)
    seq = list(so.bwd if kind == "B" else so.inp if kind == "I" else so.wgt)
    if stage == n_stages - 1 and kind in ("B", "I"):
        seq.insert(0, SEED)
    return seq


def _advance(rk: _Rank, arrival: dict, holds: list[int], n_stages: int, desched) -> bool:
    """Run the rank's next program entry; False when it waits for an input not yet sent."""
    case = rk.case
    step, it = rk.prog[rk.i]
    slow = desched is not None and desched == (rk.run.position, rk.i)
    if it == "START":
        rk.step_start = rk.t
        if case.optimizer:
            s0 = rk.t
            rk.t += rk.rng.uniform(10, 40)
            rk.annotation("Optimizer.zero_grad#SGD.zero_grad", s0)
            rk.t += rk.gap()
        if case.batch_split and (0 in holds or (n_stages - 1 in holds and case.loss)):
            for _ in range((0 in holds) + (n_stages - 1 in holds and case.loss)):
                rk.op(Op("aten::tensor_split", 5.0 + 3.0 * case.m,
                         tuple(("aten::slice", (i + 0.1) / case.m, 0.8 / case.m)
                               for i in range(case.m))), None)
    elif it == "END":
        if case.schedule in ("gpipe", "1f1b"):  # perform_reduce_grad: scale the gradients
            for _ in range(2):
                rk.op(Op("aten::div_", rk.rng.uniform(5, 20)), None)
        if case.optimizer:
            s0 = rk.t
            rk.t += 2.0
            for _ in range(rk.rng.randint(2, 4)):
                rk.op(Op("aten::add_", rk.rng.uniform(5, 60)), None)
            rk.annotation("Optimizer.step#SGD.step", s0)
            rk.t += rk.gap()
        if case.profiler_steps:
            rk.annotation(f"ProfilerStep#{step + 3}", rk.step_start - 1.0, rk.t)
        rk.t += rk.rng.uniform(50, 300)
    elif it.op == "C":
        waits = [k for k in _inputs(step, it) if k in rk.posted]
        need = {m for k in waits for m in rk.batch_of.get(k, (k,))}
        if any(k not in arrival for k in need):
            return False
        _compute(rk, it, step, n_stages, slow, [(k, max(arrival[m] for m in rk.batch_of.get(
            k, (k,)))) for k in waits], holds)
    elif it.op == "S":
        _send(rk, it, step, arrival, slow)
    elif it.op == "R" and not (case.p2p == "gloo" and not case.batched):
        _post_recv(rk, it, step)
    elif it.op == "R":
        key = (step,) + it.key
        if key not in arrival:
            return False
        _recv(rk, it, step, arrival[key])
    else:  # UNSHARD, RESHARD, REDUCE_GRAD
        s0 = rk.t
        if it.label.endswith("REDUCE_GRAD"):
            for _ in range(2):
                rk.op(Op("aten::div_", rk.rng.uniform(5, 20)), None)
        else:
            rk.t += 2.0
        if case.annotated:
            rk.annotation(f"PP:{it.label}", s0)
        rk.t += rk.gap()
    rk.i += 1
    return True


def _kernel_name(op: str) -> str:
    base = op.split("::")[-1].split(": ")[-1]
    if "mm" in base or "linear" in base or "Addmm" in base or "matmul" in base:
        return "sm90_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_execute_kernel__5x_cublas"
    return f"void at::native::vectorized_elementwise_kernel<4, {base}_kernel>(int, {base}_kernel)"


def _gpipe_spans(case: Case) -> bool:
    return case.annotated and case.schedule == "gpipe"


def _inputs(step: int, it: Item) -> list[tuple]:
    """The transfers an action's input may come by: (step, stage, "F" or "B", microbatch)."""
    return [(step, a.stage, "F" if a.kind == "F" else "B", a.mb) for a in it.acts if a.kind != "W"]


def _post_recv(rk: _Rank, it: Item, step: int) -> None:
    """An asynchronous receive (irecv, batch_isend_irecv): a short op; the wait comes later,
    as a gap before the action that consumes it."""
    st, kind, mb = it.key
    s0 = rk.t
    d = rk.rng.uniform(10, 30)
    rk.run.events.append(Ev("c10d::recv_", "cpu_op", rk.t, d))
    key = (step, st, kind, mb)
    if rk.gpu:
        ks = _nccl_start(rk, rk.t + d * 0.8, 0.0)
        life = _nccl_kernel(rk, rk.t, d, ks, 2.0, key)
    else:
        life = Ev("gloo:recv", "user_annotation", rk.t + d * 0.5, 1.0)
        rk.run.events.append(life)
    rk.posted[key] = life
    rk.t += d + rk.gap()
    if rk.case.annotated and rk.case.schedule not in ("gpipe", "1f1b"):
        rk.annotation(f"PP:{st}RECV_{kind}{mb}", s0 - 1.0, rk.t - 1.0)


def _compute(rk: _Rank, it: Item, step: int, n_stages: int, slow: bool,
             waits: list[tuple[tuple, float]], holds=()) -> None:
    case = rk.case
    s0 = rk.t
    for key, arrives in waits:  # the wait for a posted receive: a gap inside the action's span
        life = rk.posted.pop(key)
        life.dur = max(life.dur, arrives - life.ts)
        if rk.gpu:  # the stream waits for the NCCL kernel; the host goes on
            rk.ready = max(rk.ready, life.ts + life.dur + rk.rng.uniform(2, 6))
        else:
            rk.t = max(rk.t, arrives + rk.rng.uniform(3, 10))
    if _gpipe_spans(case) and rk.span is None:
        a = it.acts[0]
        rk.span = ("Forward" if a.kind == "F" else "Backward") + f" {a.mb}", s0
    first = True
    for a in it.acts:
        a0 = rk.t
        n0 = len(rk.run.compute.setdefault(step, []))
        glue = case.engine_glue and a.kind in ("I", "W")
        if glue:  # torch's split backward call: views of the output gradients it is handed
            for _ in range(2):
                _glue_op(rk, VIEW_AS, step)
        for op in _action_ops(rk, a.stage, a.kind, n_stages):
            thread = "autograd" if rk.gpu and a.kind != "F" and op is not SEED else "main"
            rk.op(op, step, 100.0 if (slow and first) else 1.0, thread)
            first = False
        if glue and a.kind == "W":  # the weight gradients accumulated in place
            _glue_op(rk, ADD_, step)
        if case.engine_glue and _hands_on_locally(a, holds, n_stages):
            _glue_op(rk, DETACH_ if a.kind == "I" else DETACH, step)
        if len(rk.run.compute[step]) == n0:  # no compute (the first stage's I): the call alone
            rk.t += rk.rng.uniform(3.0, 8.0)
        ivs = sorted(rk.run.compute[step][n0:])
        rk.run.actions.append((a.stage, a.kind, a.mb, step, sum(b - a_ for a_, b in ivs),
                               ivs[0][0] if ivs else None, max((b for _, b in ivs), default=None)))
        if case.annotated and case.schedule == "1f1b":
            rk.annotation(f"PP:{a.stage}{a.kind}{a.mb}", a0 - 1.0, rk.t - 1.0)
    if case.annotated and case.schedule not in ("gpipe", "1f1b"):
        if len(it.acts) == 1:
            a = it.acts[0]
            name = f"PP:{a.stage}{a.kind}{a.mb}"
        else:
            f, b = it.acts
            name = f"PP:({f.stage}{f.kind}{f.mb};{b.stage}{b.kind}{b.mb})OVERLAP_F_B"
        rk.annotation(name, s0 - 1.0, rk.t - 1.0)
    rk.ready = 0.0
    rk.catch_up()
    nxt = rk.prog[rk.i + 1][1] if rk.i + 1 < len(rk.prog) else None
    if rk.span is not None and not (isinstance(nxt, Item) and nxt.op == "S"):
        _close_span(rk)


#: torch's runtime around an action (with ``Case.engine_glue``), as its traces show: views of
#: the output gradients before an I or a W, a W's in-place accumulation after it, and the detach
#: that hands an output to a stage of the same rank (the turn of a V; ``detach_`` after an I):
#: no layer's compute, but the action's
VIEW_AS = Op("aten::view_as", 4.0, (("aten::view", 0.2, 0.6),))
ADD_ = Op("aten::add_", 6.0)
DETACH = Op("aten::detach", 5.0, (("detach", 0.2, 0.6),))
DETACH_ = Op("aten::detach_", 5.0, (("detach_", 0.2, 0.6),))


def _glue_op(rk: _Rank, op: Op, step: int) -> None:
    """One glue op of an action on the schedule's thread: the action's compute on a CPU trace;
    on a GPU trace only where it launches a kernel (the in-place add)."""
    rk.op(op, step if (not rk.gpu or op is ADD_) else None)


def _hands_on_locally(a, holds, n_stages: int) -> bool:
    """Whether the action's output goes to a stage on the same rank (a V's turn)."""
    if a.kind == "F":
        return a.stage + 1 < n_stages and a.stage + 1 in holds
    return a.kind in ("B", "I") and a.stage >= 1 and a.stage - 1 in holds


def _close_span(rk: _Rank) -> None:
    name, s0 = rk.span
    rk.annotation(name, s0 - 1.0, rk.t - 1.0)
    rk.span = None


def _send(rk: _Rank, it: Item, step: int, arrival: dict, slow: bool) -> None:
    case = rk.case
    dst, kind, mb = it.key
    src = dst - 1 if kind == "F" else dst + 1
    s0 = rk.t
    if kind == "F":  # get_fwd_send_ops: detach the output it sends
        rk.op(Op("aten::detach", rk.rng.uniform(4, 12), (("detach", 0.2, 0.6),)), None,
              100.0 if slow else 1.0)
    d = rk.rng.uniform(20, 80)
    t = rk.t
    rk.run.events.append(Ev("c10d::send", "cpu_op", t, d))
    xfer = case.latency_us * rk.rng.uniform(0.8, 1.2)
    if rk.gpu:
        ks = _nccl_start(rk, t + d * 0.8, rk.g)
        arrival[(step, dst, kind, mb)] = ks + xfer
        _nccl_kernel(rk, t, d, ks, xfer, None)
    else:
        rk.run.events.append(Ev("gloo:send", "user_annotation", t + d * 0.5, xfer))
        arrival[(step, dst, kind, mb)] = t + d * 0.5 + xfer
    rk.t = t + d + rk.gap()
    if case.annotated and case.schedule not in ("gpipe", "1f1b"):
        rk.annotation(f"PP:{src}SEND_{kind}{mb}", s0 - 1.0, rk.t - 1.0)
    if rk.span is not None:
        _close_span(rk)


def _nccl_start(rk: _Rank, post: float, after: float) -> float:
    """Where a NCCL kernel starts: posted, after the stream work it depends on (a send waits
    for the compute stream's output), and for a batch, with the batch's first member."""
    if rk.batch is not None:
        rk.batch[0] = max(rk.batch[0], after)
        return rk.batch[0]
    start = max(post, after)
    if rk.case.batched and _next_is_p2p(rk):
        rk.batch = [start, [], None]
    return start


def _next_is_p2p(rk: _Rank) -> bool:
    nxt = rk.prog[rk.i + 1][1] if rk.i + 1 < len(rk.prog) else None
    return isinstance(nxt, Item) and nxt.op in ("S", "R")


def _nccl_kernel(rk: _Rank, t: float, d: float, ks: float, dur: float, key) -> Ev:
    """The host's launch and the SendRecv kernel on the NCCL stream (one per batch: members
    of an open batch share the kernel, which the batch's last member emits)."""
    c = rk.launch(t + d * 0.5, d * 0.3, "main")
    if rk.batch is not None:
        b = rk.batch
        b[1].append((ks + dur, key))
        if b[2] is None:
            b[2] = Ev("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "kernel", b[0],
                      dur, "nccl", {"stream": 20, "device": 0, "correlation": c, "External id": c})
            rk.run.events.append(b[2])
        ev = b[2]
        ev.ts = b[0]
        ev.dur = max(e for e, _ in b[1]) - ev.ts
        keys = tuple(k for _, k in b[1] if k is not None)
        for k in keys:
            rk.batch_of[k] = keys
        if not _next_is_p2p(rk):
            rk.batch = None
        return ev
    ev = Ev("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "kernel", ks, dur, "nccl",
            {"stream": 20, "device": 0, "correlation": c, "External id": c})
    rk.run.events.append(ev)
    return ev


def _recv(rk: _Rank, it: Item, step: int, arrives: float) -> None:
    case = rk.case
    st, kind, mb = it.key
    s0 = rk.t
    if _gpipe_spans(case) and rk.span is None:
        rk.span = ("Forward" if kind == "F" else "Backward") + f" {mb}", s0
    end = max(rk.t + rk.rng.uniform(15, 40), arrives + rk.rng.uniform(5, 15))
    rk.run.events.append(Ev("c10d::recv_", "cpu_op", rk.t, end - rk.t))
    rk.run.events.append(Ev("gloo:recv", "user_annotation", rk.t + 2.0, max(0.5, end - rk.t - 4.0)))
    rk.t = end + rk.gap()
    if case.annotated and case.schedule not in ("gpipe", "1f1b"):
        rk.annotation(f"PP:{st}RECV_{kind}{mb}", s0 - 1.0, rk.t - 1.0)
