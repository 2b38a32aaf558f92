"""What auditing every window costs the training: mean step time with
``pipeaudit.profiler.trace_handler`` against ``torch.profiler.tensorboard_trace_handler``.

    python benchmarks/handler_overhead.py              # 3 pairs of runs
    python benchmarks/handler_overhead.py --pairs 5

Each run is ``examples/train_with_handler.py`` under torchrun: 4 ranks, gloo, CPU, 1F1B, M=8,
profiled with ``schedule(wait=1, warmup=1, active=2, repeat=R)`` (default R=6: 24 steps, 6
windows). Rank 0 times every training step (zero_grad, the schedule's step, optimizer step,
``prof.step()``: the step that ends a window includes its export and, with pipeaudit, the index
entry and the start of the audit) and every ``on_trace_ready`` call. The two handlers run in
pairs, alternating which goes first; the first cycle (4 steps) is left out. Reported: the mean
step time of each, their ratio, the handler's own time per window in the training process,
and the audit subprocess's wall and CPU time and its wait for an idle core per window (from
each audit.json).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "train_with_handler.py"


def run(handler: str, args: argparse.Namespace) -> dict:
    from pipeaudit.harness.launcher import free_port

    with tempfile.TemporaryDirectory() as tmp:
        timing = Path(tmp) / "timing.json"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "4",
               "--master-port", str(free_port()), str(EXAMPLE), "--out", str(Path(tmp) / "tb"),
               "--handler", handler, "--hidden", str(args.hidden), "--layers", str(args.layers),
               "--batch", str(args.batch), "--microbatches", "8", "--repeat", str(args.repeat),
               "--rank-timeout", "30", "--timing", str(timing)]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT),
                                                           os.environ.get("PYTHONPATH", "")]))
        subprocess.run(cmd, check=True, env=env, cwd=ROOT, capture_output=True, timeout=900)
        out = json.loads(timing.read_text())
        out["audits"] = [json.loads(p.read_text())["window"].get("cost", {})
                         for p in sorted((Path(tmp) / "tb").glob("pipeaudit/*/audit.json"))]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=6, help="profiler windows per run")
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    args = ap.parse_args()
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"{os.cpu_count()} CPUs")
    steps: dict[str, list[float]] = {"torch": [], "pipeaudit": []}
    calls: dict[str, list[float]] = {"torch": [], "pipeaudit": []}
    audits: list[dict] = []
    for i in range(args.pairs):
        order = ("torch", "pipeaudit") if i % 2 == 0 else ("pipeaudit", "torch")
        for h in order:
            r = run(h, args)
            steps[h] += r["step_s"][4:]
            calls[h] += r["handler_s"]
            audits += r["audits"]
            print(f"pair {i + 1} {h:9s}: mean step {1e3 * statistics.mean(r['step_s'][4:]):.2f} ms",
                  flush=True)
    mt, mp = statistics.mean(steps["torch"]), statistics.mean(steps["pipeaudit"])
    print("\n| handler | steps | mean step ms | median step ms | on_trace_ready ms (mean) |")
    print("|---|---:|---:|---:|---:|")
    for h in ("torch", "pipeaudit"):
        print(f"| {h} | {len(steps[h])} | {1e3 * statistics.mean(steps[h]):.2f} | "
              f"{1e3 * statistics.median(steps[h]):.2f} | {1e3 * statistics.mean(calls[h]):.2f} |")
    print(f"\npipeaudit / torch mean step time: {mp / mt:.3f} ({100 * (mp / mt - 1):+.1f}%)")
    if audits:
        print(f"audit per window ({len(audits)}): wall {statistics.mean(a['wall_s'] for a in audits):.2f} s "
              f"(waiting for ranks {statistics.mean(a['waited_s'] for a in audits):.2f} s), "
              f"CPU {statistics.mean(a['cpu_s'] for a in audits):.2f} s, waiting for an idle core "
              f"{statistics.mean(a.get('idle_wait_s', 0) for a in audits):.2f} s")


if __name__ == "__main__":
    main()
