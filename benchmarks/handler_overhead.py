"""What auditing every window costs the training: step time and exit time with
``pipeaudit.profiler.trace_handler`` against ``torch.profiler.tensorboard_trace_handler``.

    python benchmarks/handler_overhead.py --busy              # 5 pairs, a CPU-bound neighbour
    python benchmarks/handler_overhead.py --pairs 3 --repeat 6

Each run is ``examples/train_with_handler.py`` under torchrun: 4 ranks, gloo, CPU, 1F1B, M=8,
profiled with ``schedule(wait=1, warmup=1, active=2, repeat=R)`` (default R=3: 12 steps, 3
windows). Rank 0 times every training step (zero_grad, the schedule's step, optimizer step,
``prof.step()``: the step that ends a window includes its export and, with pipeaudit, the index
entry, the queue entry and, once, the start of the audit worker) and every ``on_trace_ready``
call, and notes when its loop ended. The two handlers run in pairs, alternating which goes
first; the first cycle (4 steps) is left out of the step times. ``--busy`` starts another
CPU-bound process (``python3 -c 'while True: pass'``, in a session of its own, ended after the
last run) before the first run.

Reported per handler: the mean step time, their ratio; the exit time (from rank 0's end of
the loop to torchrun's return: barrier, process group, interpreter and torchrun teardown) and
torchrun's wall time. For pipeaudit, after torchrun returns: the line the training printed,
how long the audit worker lived after the last window, every window audited or skipped, the CPU
the worker and its audits used while the job ran (against the job's own), and no process of
the run left (``/proc``'s command lines naming the run's folder).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "train_with_handler.py"
BOUND_S = 120.0  #: trace_handler's default audit_bound_s


def leftovers(folder: Path) -> list[str]:
    """Live processes whose command line names ``folder``."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if str(folder).encode() in cmd and state != "Z":
            args = cmd.replace(b"\0", b" ").decode(errors="replace")
            out.append(f"{pid} {args[:100]}")
    return out


def audit_cpu_now(tb: Path) -> float | None:
    """CPU seconds the folder's audit worker and its audit processes (ended or running) have
    used so far; None when the worker is gone."""
    from pipeaudit.during.queue import worker_pid

    pid = worker_pid(tb / "pipeaudit")
    tick = os.sysconf("SC_CLK_TCK")
    total, found = 0.0, False
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            f = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(p) == pid:  # its own, and its ended audits' (children it waited for)
            total += sum(int(x) for x in f[11:15]) / tick
            found = True
        elif int(f[1]) == pid:  # an audit under way
            total += (int(f[11]) + int(f[12])) / tick
    return total if found else None


def wait_for_audits(tb: Path, limit_s: float) -> tuple[list[dict], float]:
    """Every window's audit.json once the worker has written them all (at most ``limit_s``);
    (the documents, seconds waited)."""
    start = time.monotonic()
    index = tb / "pipeaudit"
    while True:
        folders = sorted(p for p in index.glob("step_*") if (p / "queued.json").exists())
        if all((f / "audit.json").exists() for f in folders) and not leftovers(tb):
            break
        if time.monotonic() - start > limit_s:
            break
        time.sleep(0.2)
    docs = [json.loads((f / "audit.json").read_text()) for f in folders
            if (f / "audit.json").exists()]
    for f, d in zip(folders, docs):
        d["queued_at"] = json.loads((f / "queued.json").read_text())["queued_at"]
        d["written_at"] = (f / "audit.json").stat().st_mtime
    return docs, time.monotonic() - start


def run(handler: str, args: argparse.Namespace) -> dict:
    from pipeaudit.harness.launcher import free_port

    with tempfile.TemporaryDirectory() as tmp:
        timing, tb = Path(tmp) / "timing.json", Path(tmp) / "tb"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "4",
               "--master-port", str(free_port()), str(EXAMPLE), "--out", str(tb),
               "--handler", handler, "--hidden", str(args.hidden), "--layers", str(args.layers),
               "--batch", str(args.batch), "--microbatches", "8", "--repeat", str(args.repeat),
               "--rank-timeout", "30", "--timing", str(timing)]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT),
                                                           os.environ.get("PYTHONPATH", "")]))
        import resource

        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.time()
        res = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
        t1 = time.time()
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        job_cpu = ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime
        audit_cpu = audit_cpu_now(tb) if handler == "pipeaudit" else None
        if res.returncode != 0:
            raise SystemExit(f"{handler} run failed:\n{res.stderr[-3000:]}")
        out = json.loads(timing.read_text())
        out.update(exit_s=t1 - out["loop_end"], wall_s=t1 - t0, audits=[], left=[],
                   job_cpu_s=job_cpu, audit_cpu_during_s=audit_cpu)
        out["lines"] = [ln for ln in res.stderr.splitlines() if "not audited yet" in ln]
        if handler == "pipeaudit":
            docs, waited = wait_for_audits(tb, BOUND_S + 60)
            out["audits"] = docs
            out["worker_after_exit_s"] = waited
            out["left"] = leftovers(tb)
    return out


def spinner(seconds: float) -> subprocess.Popen:
    """Another CPU-bound process, in a session of its own, gone after ``seconds`` at most."""
    return subprocess.Popen(["timeout", str(int(seconds)), sys.executable, "-c",
                             "while True: pass"], start_new_session=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=3, help="profiler windows per run")
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--against", choices=["pipeaudit", "torch"], default="pipeaudit",
                    help="the handler held against torch's (torch: an A/A run, the host's noise)")
    ap.add_argument("--busy", action="store_true",
                    help="run a CPU-bound process beside the runs (ended after the last)")
    args = ap.parse_args()
    busy = spinner(3600) if args.busy else None
    try:
        time.sleep(1.0 if busy else 0)
        print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
              f"{os.cpu_count()} CPUs; CPU-bound neighbour: {'yes' if busy else 'no'}",
              flush=True)
        results = pairs(args)
    finally:
        if busy is not None:
            os.killpg(busy.pid, 9)
            busy.wait()
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    report(results, args.against)


def pairs(args: argparse.Namespace) -> dict[str, list[dict]]:
    results: dict[str, list[dict]] = {"A": [], "B": []}  # A: torch's handler, B: --against
    handler = {"A": "torch", "B": args.against}
    for i in range(args.pairs):
        for ab in (("A", "B") if i % 2 == 0 else ("B", "A")):
            h = handler[ab]
            r = run(h, args)
            results[ab].append(r)
            kinds = [d["kind"] for d in r["audits"]]
            print(f"pair {i + 1} {h:9s}: mean step {1e3 * statistics.mean(r['step_s'][4:]):.2f} ms, "
                  f"exit {r['exit_s']:.2f} s, torchrun {r['wall_s']:.1f} s"
                  + (f", windows {kinds}, worker done {r['worker_after_exit_s']:.1f} s after "
                     f"torchrun, left: {len(r['left'])}" if h == "pipeaudit" else ""),
                  flush=True)
    return results


def report(results: dict[str, list[dict]], against: str) -> None:
    steps = {h: [s for r in rs for s in r["step_s"][4:]] for h, rs in results.items()}
    names = {"A": "torch", "B": "torch (again)" if against == "torch" else against}
    print("\n| handler | runs | steps | mean step ms | median step ms | on_trace_ready ms (mean) "
          "| exit s (median, max) | torchrun s (median) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for h, rs in results.items():
        calls = [c for r in rs for c in r["handler_s"]]
        exits = [r["exit_s"] for r in rs]
        print(f"| {names[h]} | {len(rs)} | {len(steps[h])} | {1e3 * statistics.mean(steps[h]):.2f} | "
              f"{1e3 * statistics.median(steps[h]):.2f} | {1e3 * statistics.mean(calls):.2f} | "
              f"{statistics.median(exits):.2f}, {max(exits):.2f} | "
              f"{statistics.median(r['wall_s'] for r in rs):.1f} |")
    mt, mp = statistics.mean(steps["A"]), statistics.mean(steps["B"])
    print(f"\n{names['B']} / torch mean step time: {mp / mt:.3f} ({100 * (mp / mt - 1):+.1f}%)")
    ratios = [statistics.mean(p["step_s"][4:]) / statistics.mean(t["step_s"][4:])
              for t, p in zip(results["A"], results["B"])]
    print("pair by pair: " + ", ".join(f"{x:.3f}" for x in ratios))
    extra = [p["exit_s"] - t["exit_s"] for t, p in zip(results["A"], results["B"])]
    print(f"exit time, {names['B']} minus torch, pair by pair (s): "
          + ", ".join(f"{x:+.2f}" for x in extra) + f"; max {max(extra):+.2f}")
    extra_call = (statistics.mean(c for r in results["B"] for c in r["handler_s"])
                  - statistics.mean(c for r in results["A"] for c in r["handler_s"]))
    per_step = extra_call / 4  # a window every 4 steps
    print(f"on_trace_ready, {names['B']} minus torch: {1e3 * extra_call:+.2f} ms per window, "
          f"{1e3 * per_step:+.2f} ms per step ({100 * per_step / mt:+.2f}% of torch's mean step)")
    if against != "pipeaudit":
        return
    docs = [d for r in results["B"] for d in r["audits"]]
    kinds = {k: sum(d["kind"] == k for d in docs) for k in sorted({d["kind"] for d in docs})}
    windows = sum(len(r["step_s"]) // 4 for r in results["B"])
    print(f"windows: {windows}, audit.json written: {len(docs)} ({kinds})")
    for d in docs:
        if d["kind"] == "window-skipped":
            print(f"  skipped: {d['skipped']}")
    life = [max(d["written_at"] for d in r["audits"]) - max(d["queued_at"] for d in r["audits"])
            for r in results["B"] if r["audits"]]
    if life:
        print(f"last audit.json written after the last window: median {statistics.median(life):.1f} s,"
              f" max {max(life):.1f} s (bound {BOUND_S:g} s)")
    costs = [d["window"].get("cost", {}) for d in docs]
    if costs:
        print(f"per window: audit CPU {statistics.mean(c.get('cpu_s', 0) for c in costs):.2f} s "
              f"waiting for an idle core "
              f"{statistics.mean(c.get('idle_wait_s', 0) for c in costs):.2f} s")
    during = [(r["audit_cpu_during_s"], r["job_cpu_s"]) for r in results["B"]
              if r["audit_cpu_during_s"] is not None]
    if during:
        a, j = sum(x for x, _ in during), sum(y for _, y in during)
        print(f"CPU of the audit worker and its audits while the job ran: {a:.2f} s in "
              f"{len(during)} runs, against the job's own {j:.1f} s ({100 * a / j:.2f}%)")
    lines = [r["lines"] for r in results["B"]]
    print(f"training's line at exit: {sum(map(len, lines))} in {len(lines)} runs; e.g. "
          f"{next((ln[0] for ln in lines if ln), '-')}")
    left = [x for r in results["B"] for x in r["left"]]
    print(f"processes left after the runs: {len(left)}" + "".join(f"\n  {x}" for x in left))


if __name__ == "__main__":
    main()
