"""Make a job of many pipeline replicas (up to 1,024 ranks and more) from a real harness run.

    python benchmarks/make_job.py                       # every job set into benchmarks/data/
    python benchmarks/make_job.py job_p8_r128           # one set
    python benchmarks/make_job.py --list                # what each set is

A real training job of 1,024 GPUs is D data-parallel replicas of a P-stage pipeline. This
script builds one honestly from a real ``pipeaudit profile`` run of P stages x 2 replicas
(FSDP over gloo, 1F1B, ``--record-shapes``; :data:`SOURCES`, made with the harness when
missing): every rank file of the job is a real rank file of that run, byte for byte from
its ``traceEvents`` on. What changes is the header, as another rank of a bigger job would
have it:

* ``distributedInfo``: the rank and world size of the job, and ``pg_config`` as a DeviceMesh
  (``pp``, ``dp_shard``; pp outermost, as torchtitan builds it) writes it: the default group,
  the rank's ``mesh_pp`` group (its replica's P ranks) and its ``mesh_dp_shard`` group (the D
  ranks at its stage position), with ``pg_name`` numbered in creation order;
* ``host_name``: kept (the source ranks shared one host, hence one clock); with
  ``--ranks-per-host 8`` eight ranks per host (``node0000``, ...), as on 8-GPU nodes, which
  makes the analysis estimate clock offsets between hosts from the send/recv pairs (and, the
  clocks being one, measure only the asymmetry of the transfers);
* ``baseTimeNanoseconds``: every replica's clock is shifted by its own offset (0 to 0.5 ms),
  so that the replicas do not start at the same nanosecond; all times in the events are
  relative to it (Kineto's format), so the events themselves are untouched.

Two sets run M = 128 microbatches for 5 steps (issue 34's "64-rank job, M = 128, 5 steps",
whose audit must take at most 10 % of ``pipeaudit analyze``: ``benchmarks/scale.py
--audit-share``): ``job_p64_r1_m128``, one replica of 64 stages, and ``job_p8_r8_m128``, 8
replicas of 8 stages. The first is built from a run of one replica (``--dp 1``, no FSDP: 128
processes of that run need more memory than this machine's 23 GB), the only source a job
of one replica may have.

Replica d of the job is a copy of the run's replica d % 2 (or its only one), ranks relabelled
to the job's layout: the rank at stage position p of replica d is ``p * D + d``. The files are
written as ``rank{r}_trace.json.gz`` (torchtitan's name; one gzip member each, ISA-L level 2)
or, with ``--json``, as plain ``rank{r}_trace.json``. On this 2-core machine a 1,024-rank set
takes about a minute (the harness source run once: 0.5 to 15 min; src_p8_dp2_m128 2 min,
src_p64_dp1_m128 4 min, 22 GB at its peak).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DATA = HERE / "data"
RANKS_PER_HOST = 0  #: 0: keep the source's host name
MAX_SHIFT_NS = 500_000

#: source run name -> ``pipeaudit profile`` options (P stages x 2 FSDP replicas, 1F1B)
SOURCES: dict[str, list[str]] = {
    "src_p8_dp2": ["-P", "8", "--dp", "2", "-M", "16", "--steps", "3", "--layers", "16"],
    "src_p64_dp2": ["-P", "64", "--dp", "2", "-M", "64", "--steps", "2", "--layers", "64"],
    "src_p8_dp2_m128": ["-P", "8", "--dp", "2", "-M", "128", "--steps", "5", "--layers", "16"],
    # one replica: 128 processes of M = 128 and 5 steps need more than this machine's 23 GB
    "src_p64_dp1_m128": ["-P", "64", "--dp", "1", "-M", "128", "--steps", "5", "--layers", "64"],
}
COMMON = ["--schedule", "1f1b", "--record-shapes", "--hidden", "64", "--seq-len", "16",
          "--timeout", "3000"]
#: job set -> (source run, replicas D)
JOBS: dict[str, tuple[str, int]] = {
    "job_p8_r8": ("src_p8_dp2", 8),  # 64 ranks
    "job_p8_r32": ("src_p8_dp2", 32),  # 256 ranks
    "job_p8_r128": ("src_p8_dp2", 128),  # 1,024 ranks
    "job_p64_r1": ("src_p64_dp2", 1),  # 64 ranks
    "job_p64_r4": ("src_p64_dp2", 4),  # 256 ranks
    "job_p64_r16": ("src_p64_dp2", 16),  # 1,024 ranks
    "job_p8_r8_m128": ("src_p8_dp2_m128", 8),  # 64 ranks, M = 128, 5 steps
    "job_p64_r1_m128": ("src_p64_dp1_m128", 1),  # 64 ranks, M = 128, 5 steps (issue 34's audit share)
}
_INFO_RE = re.compile(rb'"distributedInfo": (\{.*?\}),?\s*\n')
_HOST_RE = re.compile(rb'"host_name": "[^"]*"')
_BASE_RE = re.compile(rb'"baseTimeNanoseconds": (\d+)')


def make_source(name: str, data: Path) -> Path:
    """The harness run ``name`` (made if missing)."""
    out = data / name
    if (out / "manifest.json").exists():
        return out
    if out.exists():
        shutil.rmtree(out)
    cmd = [sys.executable, "-m", "pipeaudit", "profile", *SOURCES[name], *COMMON, "--out", str(out)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    print(f"{name}: pipeaudit profile {' '.join(cmd[4:])}", file=sys.stderr)
    subprocess.run(cmd, check=True, env=env, cwd=ROOT)
    return out


def pg_config(P: int, D: int, p: int, d: int, backend: str) -> tuple[list[dict], int]:
    """The rank's process groups as a DeviceMesh (pp, dp_shard) writes them, and pg_count."""
    world = P * D
    groups = [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": backend,
               "pg_size": world, "ranks": list(range(world))},
              {"pg_name": str(1 + d), "pg_desc": "mesh_pp", "backend_config": backend,
               "pg_size": P, "ranks": [q * D + d for q in range(P)]}]
    if D > 1:
        groups.append({"pg_name": str(1 + D + p), "pg_desc": "mesh_dp_shard",
                       "backend_config": backend, "pg_size": D,
                       "ranks": [p * D + e for e in range(D)]})
    return groups, 1 + D + (P if D > 1 else 0)


def split_header(doc: bytes) -> tuple[bytes, bytes]:
    """(header up to ``"traceEvents"``, the rest) of a Kineto JSON document."""
    at = doc.index(b'"traceEvents"')
    return doc[:at], doc[at:]


def new_header(header: bytes, *, rank: int, P: int, D: int, p: int, d: int, shift_ns: int,
               ranks_per_host: int = RANKS_PER_HOST) -> bytes:
    m = _INFO_RE.search(header)
    if m is None:
        raise SystemExit("the source trace has no distributedInfo line")
    info = json.loads(m.group(1))
    backend = next((g.get("backend_config", "") for g in info.get("pg_config", [])), "cpu:gloo")
    groups, count = pg_config(P, D, p, d, backend)
    info.update(rank=rank, world_size=P * D, pg_count=count, pg_config=groups)
    out = header[:m.start(1)] + json.dumps(info).encode() + header[m.end(1):]
    if ranks_per_host:
        out = _HOST_RE.sub(f'"host_name": "node{rank // ranks_per_host:04d}"'.encode(), out, count=1)
    return _BASE_RE.sub(lambda b: b'"baseTimeNanoseconds": %d' % (int(b.group(1)) + shift_ns),
                        out, count=1)


def shift_of(d: int) -> int:
    """Replica d's clock offset (ns): spread over [0, MAX_SHIFT_NS), the same every time."""
    return (d * 7919 * 1000) % MAX_SHIFT_NS


def _compress(data: bytes) -> bytes:
    try:
        from isal import igzip

        return igzip.compress(data, compresslevel=2)
    except ImportError:  # pragma: no cover
        import gzip

        return gzip.compress(data, compresslevel=6)


def _write_position(args: tuple) -> int:
    """Write every replica's rank at one source rank's stage position; bytes of JSON."""
    src_file, out, P, D, p, src_d, src_dp, plain, per_host = args
    import gzip

    raw = Path(src_file).read_bytes()
    doc = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    header, body = split_header(doc)
    total = 0
    for d in range(src_d, D, src_dp):
        rank = p * D + d
        text = new_header(header, rank=rank, P=P, D=D, p=p, d=d, shift_ns=shift_of(d),
                          ranks_per_host=per_host) + body
        total += len(text)
        if plain:
            (Path(out) / f"rank{rank}_trace.json").write_bytes(text)
        else:
            (Path(out) / f"rank{rank}_trace.json.gz").write_bytes(_compress(text))
    return total


def make_job(name: str, data: Path, *, plain: bool, force: bool, workers: int,
             ranks_per_host: int = RANKS_PER_HOST) -> None:
    source, D = JOBS[name]
    out = data / (name + ("_json" if plain else ""))
    done = out / "job.json"
    if done.exists() and not force:
        print(f"{out.name}: exists, skipped", file=sys.stderr)
        return
    src = make_source(source, data)
    manifest = json.loads((src / "manifest.json").read_text())
    P, src_dp = manifest["layout"]["pp"], manifest["layout"]["dp"]
    if src_dp not in (1, 2) or (src_dp == 1 and D != 1):
        raise SystemExit(f"{src}: expected a run of 2 replicas (or 1, for a job of one), got {src_dp}")
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    t0 = time.perf_counter()
    tasks = []
    for sd, pipe in enumerate(manifest["pipelines"]):
        for p, r in enumerate(pipe):
            tasks.append((str(src / f"rank{r}.json.gz"), str(out), P, D, p, sd, src_dp, plain,
                          ranks_per_host))
    tasks = [t for t in tasks if t[5] < D]  # one replica: source replica 0 only
    with ProcessPoolExecutor(max_workers=workers) as pool:
        total = sum(pool.map(_write_position, tasks))
    files = sorted(out.glob("rank*_trace.json*"))
    disk = sum(f.stat().st_size for f in files)
    facts = {"source": str(src.relative_to(data)), "source_command": manifest.get("command"),
             "pp": P, "dp": D, "ranks": P * D, "json_bytes": total, "disk_bytes": disk,
             "format": "json" if plain else "json.gz", "ranks_per_host": ranks_per_host,
             "max_replica_shift_ns": MAX_SHIFT_NS}
    done.write_text(json.dumps(facts, indent=1))
    print(f"{out.name}: {len(files)} ranks ({P} stages x {D} replicas), {total / 1e9:.2f} GB JSON, "
          f"{disk / 1e6:.0f} MB on disk, {time.perf_counter() - t0:.0f} s", file=sys.stderr)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sets", nargs="*", help=f"sets to make (default: all of {', '.join(JOBS)})")
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--json", action="store_true", help="plain JSON files instead of gzip")
    ap.add_argument("--force", action="store_true", help="remake sets that exist")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--ranks-per-host", type=int, default=RANKS_PER_HOST,
                    help="name a host per N ranks (default 0: keep the source's host name)")
    ap.add_argument("--list", action="store_true", help="print the sets and exit")
    args = ap.parse_args()
    if args.list:
        for name, (source, D) in JOBS.items():
            P = int(SOURCES[source][1])
            print(f"{name:16} {P} stages x {D} replicas = {P * D} ranks, from {source}: "
                  f"pipeaudit profile {' '.join(SOURCES[source] + COMMON)}")
        return
    for name in args.sets or list(JOBS):
        if name not in JOBS:
            ap.error(f"unknown set {name!r} (sets: {', '.join(JOBS)})")
        make_job(name, args.data, plain=args.json, force=args.force, workers=args.workers,
                 ranks_per_host=args.ranks_per_host)


if __name__ == "__main__":
    main()
