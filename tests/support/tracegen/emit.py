"""Write a generated run as Kineto (Chrome-trace) JSON, one file per rank, as torch.profiler
writes them: the header's ``distributedInfo`` (rank, world size, backend, ``pg_config``), CPU
ops and annotations on the rank's threads, GPU kernels on streams."""

from __future__ import annotations

import random
from pathlib import Path

import msgspec

from tests.support.tracegen.case import Case
from tests.support.tracegen.timing import RankRun, grid_rank

BASE_US = 1_790_000_000_000.0  #: absolute µs, as Kineto writes them


def pg_config(case: Case, rank: int) -> list[dict]:
    """The process groups a rank's trace lists: the default group, its pipeline group and (for
    a grid) its data- and tensor-parallel groups, named as a DeviceMesh names them or not."""
    world = case.pp * case.dp * case.tp
    backend = "nccl" if case.p2p == "nccl" else "gloo"
    cfg = f"cpu:gloo,cuda:{backend}"
    groups = [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": cfg, "pg_size": world,
               "ranks": list(range(world))}]
    if world == case.pp:
        return groups
    t = rank % case.tp
    rep = next(d for d in range(case.dp) for p in range(case.pp)
               if grid_rank(case, d, p, t) == rank)
    pos = next(p for p in range(case.pp) if grid_rank(case, rep, p, t) == rank)
    named = [("pp", [grid_rank(case, rep, p, t) for p in range(case.pp)])]
    if case.dp > 1:
        named.append(("dp_shard", [grid_rank(case, d, pos, t) for d in range(case.dp)]))
    if case.tp > 1:
        named.append(("tp", [grid_rank(case, rep, pos, i) for i in range(case.tp)]))
    for i, (dim, ranks) in enumerate(named, start=1):
        groups.append({"pg_name": str(i), "pg_desc": f"mesh_{dim}" if case.named_groups else
                       "undefined", "backend_config": cfg, "pg_size": len(ranks), "ranks": ranks})
    return groups


def trace_doc(case: Case, run: RankRun) -> dict:
    """The Kineto document of one rank."""
    pid = 4000 + 13 * run.rank
    tids = {"main": pid, "autograd": pid + 26, "compute": 7, "nccl": 20}
    evs = []
    for i, e in enumerate(run.events):
        gpu = e.thread in ("compute", "nccl")
        d = {"ph": "X", "cat": e.cat, "name": e.name, "pid": 0 if gpu else pid,
             "tid": tids[e.thread], "ts": round(BASE_US + e.ts, 3), "dur": round(e.dur, 3)}
        args = dict(e.args or {})
        if e.cat == "cpu_op":
            args.setdefault("External id", i + 1)
        if args:
            d["args"] = args
        evs.append(d)
    evs.append({"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans",
                "tid": "PyTorch Profiler", "ts": BASE_US, "dur": max(e.ts + e.dur for e in run.events)})
    evs.append({"name": "process_name", "ph": "M", "ts": BASE_US, "pid": pid, "tid": 0,
                "args": {"name": "python3"}})
    if case.p2p == "nccl":
        evs.append({"name": "process_labels", "ph": "M", "ts": BASE_US, "pid": 0, "tid": 0,
                     "args": {"labels": "GPU 0"}})
    evs.append({"name": "thread_name", "ph": "M", "ts": BASE_US, "pid": pid, "tid": pid,
                "args": {"name": "thread " + str(pid) + " (python3)"}})
    if case.shuffle:
        random.Random(case.seed + run.rank).shuffle(evs)
    else:
        evs.sort(key=lambda e: (e["ts"], -e.get("dur", 0)))
    world = case.pp * case.dp * case.tp
    gpu = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85017493504,
            "computeMajor": 9, "computeMinor": 0, "numSms": 132}] if case.p2p == "nccl" else []
    doc = {"schemaVersion": 1, "deviceProperties": gpu,
           "distributedInfo": {"backend": "nccl" if case.p2p == "nccl" else "gloo",
                               "rank": run.rank, "world_size": world,
                               "pg_count": len(pg_config(case, run.rank)),
                               "pg_config": pg_config(case, run.rank)},
           "host_name": "gen", "displayTimeUnit": "ms",
           "baseTimeNanoseconds": 1_790_000_000_000_000_000 - int(BASE_US * 1000),
           "traceEvents": evs}
    return doc


def write(case: Case, runs: list[RankRun], folder: str | Path) -> list[Path]:
    """Write the case's traces (only ``case.one_rank``'s if set) into ``folder``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for run in runs:
        if case.one_rank is not None and run.rank != case.one_rank:
            continue
        name = (f"rank{run.rank}.json" if (case.seed + run.rank) % 3 else
                f"host_{4000 + run.rank}.{1790000000 + run.rank}.pt.trace.json")
        p = folder / name
        p.write_bytes(msgspec.json.encode(trace_doc(case, run)))
        out.append(p)
    return out
