"""Micro-benchmark of trace decoding (not a test).

    python benchmarks/bench_decode.py --size-mb 100            # generate a Kineto-like file
    python benchmarks/bench_decode.py PATH [PATH ...]          # or time real traces
    python benchmarks/bench_decode.py --size-mb 50 --gzip --repeat 3
    python benchmarks/bench_decode.py PATH --baseline /tmp/old-tree --repeat 7   # before/after

For each file it times, in a fresh child process each (so that peak RSS is the method's own):

* ``read_trace``          pipeaudit's reader with the columns ``analyze`` asks for (the
                          compiled scanner when it is built), one file, default budget;
* ``read_trace-msgspec``  the same with ``PIPEAUDIT_NO_SCANNER=1`` (msgspec Structs);
* ``read_trace-all``      every event column;
* ``msgspec``             read, gunzip, untyped ``msgspec.json.decode`` into dicts and lists;
* ``json``                read, gunzip, ``json.loads``.

and prints wall and CPU seconds (best of ``--repeat``; CPU time is the steadier number on a
shared machine), MB/s of *uncompressed* JSON, and peak RSS (max
resident set of the child minus its RSS after imports), also as a multiple of the JSON size.

``--baseline TREE`` compares the ``read_trace*`` methods with another pipeaudit source tree
(e.g. ``git worktree add /tmp/old HEAD~3`` and its ``setup.py build_ext --inplace``): the two
trees run alternately, one child per run, ``--repeat`` rounds, and the minimum and median
CPU of each are printed with their ratio (the noise of a shared machine hits both alike;
each child reads the file twice and keeps the faster read, the first also paying lazy imports).
Generated files go to ``benchmarks/data/`` (git-ignored) unless ``--out`` says otherwise.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


# --------------------------------------------------------------------------- generator


def generate(path: Path, size_mb: float, *, gz: bool, seed: int = 0, rank: int = 0, world_size: int = 8) -> Path:
    """Write a Kineto-like trace of about ``size_mb`` MB of JSON (before gzip): the event mix
    of a GPU training step (cpu_op with shapes, cuda_runtime, kernels, flows, memory samples,
    python_function) with relative µs timestamps of three decimals and a base time."""
    rng = random.Random(seed)
    target = int(size_mb * 1e6)
    parts: list[str] = [
        '{\n  "schemaVersion": 1,\n  "deviceProperties": [{"id": 0, "name": "NVIDIA H100", "totalGlobalMem": 85000000000}],\n'
        f'  "distributedInfo": {{"backend": "nccl", "rank": {rank}, "world_size": {world_size}}},\n'
        '  "with_stack": 1, "profile_memory": 1,\n  "traceName": "generated",\n'
        '  "displayTimeUnit": "ms",\n  "baseTimeNanoseconds": 1790857026000000000,\n  "traceEvents": ['
    ]
    size = len(parts[0])
    t = 4_459_700_051_309_628  # ns, relative to the base, like torch 2.13 writes
    ext = corr = 0
    pid, tid = 4445, 4446
    first = True

    def us(ns: int) -> str:
        return f"{ns // 1000}.{ns % 1000:03d}"

    while size < target:
        t += rng.randint(200, 5000)
        ext += 1
        corr += 1
        dur = rng.randint(1000, 90000)
        chunk = [
            f'{{"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": {pid}, "tid": {tid}, '
            f'"ts": {us(t)}, "dur": {us(dur)}, "args": {{"External id": {ext}, "Record function id": 0, '
            f'"Ev Idx": {ext}, "Input Dims": [[8, 1024], [1024, 1024], [1024]], '
            f'"Input type": ["float", "float", "float"], "Input Strides": [[1024, 1], [1024, 1], [1]], '
            f'"Concrete Inputs": ["", "", ""]}}}}',
            f'{{"ph": "X", "cat": "python_function", "name": "torch/nn/modules/linear.py(125): forward", '
            f'"pid": {pid}, "tid": {tid}, "ts": {us(t + 5)}, "dur": {us(dur - 10)}, '
            f'"args": {{"Python parent id": {ext}, "Python id": {ext + 1}, "Ev Idx": {ext}}}}}',
            f'{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": {pid}, "tid": {tid}, '
            f'"ts": {us(t + 300)}, "dur": {us(rng.randint(2000, 9000))}, "args": {{"External id": {ext}, '
            f'"cbid": 211, "correlation": {corr}}}}}',
            f'{{"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32", '
            f'"pid": 0, "tid": 7, "ts": {us(t + 9000)}, "dur": {us(rng.randint(3000, 80000))}, '
            f'"args": {{"External id": {ext}, "queued": 0, "device": 0, "context": 1, "stream": 7, '
            f'"correlation": {corr}, "registers per thread": 168, "shared memory": 98304, '
            f'"blocks per SM": 0.5, "warps per SM": 4.0, "grid": [66, 1, 1], "block": [256, 1, 1], '
            f'"est. achieved occupancy %": 6}}}}',
            f'{{"ph": "s", "id": {corr}, "pid": {pid}, "tid": {tid}, "ts": {us(t + 300)}, '
            f'"cat": "ac2g", "name": "ac2g"}}',
            f'{{"ph": "f", "id": {corr}, "pid": 0, "tid": 7, "ts": {us(t + 9000)}, '
            f'"cat": "ac2g", "name": "ac2g", "bp": "e"}}',
        ]
        if ext % 4 == 0:
            chunk.append(
                f'{{"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": {pid}, '
                f'"tid": {tid}, "ts": {us(t + 50)}, "args": {{"Total Reserved": 0, '
                f'"Total Allocated": {rng.randint(1, 10**10)}, "Bytes": 4096, "Device Id": 0, '
                f'"Device Type": 1, "Addr": 94299175445504, "Ev Idx": {ext}}}}}'
            )
        text = ("\n  " if first else ",\n  ") + ",\n  ".join(chunk)
        first = False
        parts.append(text)
        size += len(text)
    parts.append("\n  ]\n}\n")
    data = "".join(parts).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(data, compresslevel=1) if gz else data)
    return path


# --------------------------------------------------------------------------- one measurement


def _rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


#: The columns ``analyze`` decodes (``pipeaudit.timeline.build.REDUCE_COLUMNS``).
ANALYSIS_COLUMNS = ("tid", "correlation")


def _read_text(path: Path) -> bytes:
    """The file's JSON (gunzipped): the benchmark's own, the same in every tree."""
    data = path.read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def _child(method: str, path: str, repeat: int, root: Path = ROOT) -> None:
    sys.path.insert(0, str(root))
    import msgspec

    from pipeaudit.trace import read_trace

    if method == "read_trace-msgspec":
        os.environ["PIPEAUDIT_NO_SCANNER"] = "1"
    base_rss = _rss_mb()
    best = best_cpu = float("inf")
    n_events = 0
    cpus = []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        if method.startswith("read_trace"):
            cols = None if method == "read_trace-all" else ANALYSIS_COLUMNS
            rt = read_trace(Path(path), columns=cols)
            n_events = rt.events.height
            del rt
        else:
            data = _read_text(Path(path))
            obj = msgspec.json.decode(data) if method == "msgspec" else json.loads(data)
            n_events = len(obj["traceEvents"])
            del obj, data
        best = min(best, time.perf_counter() - t0)
        best_cpu = min(best_cpu, time.process_time() - c0)
        cpus.append(time.process_time() - c0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3  # KB -> MB on Linux
    json_bytes = len(_read_text(Path(path)))  # after the peak was taken
    print(json.dumps({"method": method, "seconds": best, "cpu_seconds": best_cpu, "json_bytes": json_bytes, "events": n_events,
                      "peak_rss_mb": peak - base_rss, "cpus": cpus}))


def measure(method: str, path: Path, repeat: int, root: Path = ROOT) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--child", method, str(path), "--repeat", str(repeat),
         "--root", str(root)],
        check=True, capture_output=True, text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def compare(paths: list[Path], methods: list[str], baseline: Path, rounds: int) -> None:
    """``read_trace*`` methods in this tree against ``baseline``, alternated, one child per run."""
    print(f"{'file':28} {'method':19} {'baseline CPU s min/med':>23} {'this tree min/med':>18} {'min ratio':>9}")
    for p in paths:
        for m in (m for m in methods if m.startswith("read_trace")):
            cpu: dict[str, list[float]] = {"baseline": [], "this": []}
            for _ in range(rounds):
                for name, root in (("baseline", baseline), ("this", ROOT)):
                    # best of two reads in the child: the first also pays lazy imports
                    cpu[name].append(measure(m, p, 2, root)["cpu_seconds"])
            (b, t) = (sorted(cpu["baseline"]), sorted(cpu["this"]))
            print(f"{p.name[:28]:28} {m:19} {b[0]:11.3f} {b[len(b) // 2]:11.3f} {t[0]:9.3f} "
                  f"{t[len(t) // 2]:8.3f} {t[0] / b[0]:9.3f}", flush=True)


def time_parallel(args: argparse.Namespace) -> None:
    d = args.out / f"ranks_{args.ranks}x{args.size_mb:g}MB"
    for r in range(args.ranks):
        p = d / f"rank{r}.json"
        if not p.exists():
            generate(p, args.size_mb, gz=False, seed=r, rank=r, world_size=args.ranks)
    code = (
        "import sys, time; sys.path.insert(0, %r)\n"
        "from pipeaudit.trace import load_traces\n"
        "t = time.perf_counter(); ts = load_traces([%r], jobs=int(sys.argv[1]))\n"
        "print(time.perf_counter() - t, sum(r.events.height for r in ts))\n"
    ) % (str(ROOT), str(d))
    for jobs in (1, args.ranks):
        out = subprocess.run([sys.executable, "-c", code, str(jobs)], check=True, capture_output=True, text=True)
        secs, events = out.stdout.split()
        print(f"load_traces {args.ranks} ranks x {args.size_mb:g} MB, jobs={jobs}: {float(secs):.2f} s "
              f"({args.ranks * args.size_mb / float(secs):.0f} MB/s, {events} events)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="*", type=Path, help="trace files to time (default: generate one)")
    ap.add_argument("--size-mb", type=float, default=100.0, help="size of the generated JSON (MB)")
    ap.add_argument("--gzip", action="store_true", help="gzip the generated file")
    ap.add_argument("--out", type=Path, default=HERE / "data", help="where to write the generated file")
    ap.add_argument("--repeat", type=int, default=3, help="runs per method; the best is kept")
    ap.add_argument("--methods", default="read_trace,read_trace-msgspec,read_trace-all,msgspec,json")
    ap.add_argument("--baseline", type=Path, default=None,
                    help="another pipeaudit source tree: compare the read_trace methods, alternated")
    ap.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    ap.add_argument("--ranks", type=int, default=0,
                    help="also generate this many rank files of --size-mb each and time load_traces "
                         "with jobs=1 against jobs=RANKS")
    ap.add_argument("--child", nargs=2, metavar=("METHOD", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(args.child[0], args.child[1], args.repeat, args.root)
        return
    if args.ranks:
        time_parallel(args)
        return
    paths = args.paths
    if not paths:
        name = f"generated_{args.size_mb:g}MB.json" + (".gz" if args.gzip else "")
        target = args.out / name
        if not target.exists():
            t0 = time.perf_counter()
            generate(target, args.size_mb, gz=args.gzip)
            print(f"generated {target} ({target.stat().st_size / 1e6:.1f} MB on disk) "
                  f"in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        paths = [target]
    if args.baseline is not None:
        compare(paths, args.methods.split(","), args.baseline, args.repeat)
        return
    print(f"{'file':40} {'method':18} {'events':>8} {'JSON MB':>7} {'wall s':>7} {'MB/s':>6} "
          f"{'CPU s':>6} {'MB/CPUs':>7} {'peak RSS MB':>11} {'x JSON':>6}")
    for p in paths:
        for m in args.methods.split(","):
            r = measure(m, p, args.repeat)
            mb = r["json_bytes"] / 1e6
            print(f"{p.name[:40]:40} {m:18} {r['events']:8d} {mb:7.1f} {r['seconds']:7.3f} "
                  f"{mb / r['seconds']:6.1f} {r['cpu_seconds']:6.3f} {mb / r['cpu_seconds']:7.1f} "
                  f"{r['peak_rss_mb']:11.0f} {r['peak_rss_mb'] / mb:6.1f}", flush=True)


if __name__ == "__main__":
    main()
