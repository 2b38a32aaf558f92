"""Does profiling change what it measures? Step time with and without torch.profiler.

    python benchmarks/profiler_overhead.py            # the configurations below
    python benchmarks/profiler_overhead.py --repeat 3

Each configuration is one real ``pipeaudit profile`` run with W warm-up steps and S
profiled steps. The harness times every training step on rank 0 the same way (zero_grad,
the schedule's step, optimizer step) and records the warm-up steps, which run without the
profiler, in the manifest's ``warmup_step_wall_s`` and the profiled ones in
``step_wall_s``. The first two warm-up steps (first-touch allocation) are left out; the
overhead is median(profiled) / median(unprofiled) - 1. Same processes, same model, same
data, interleaved in time only by the order warm-up -> profiled.
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

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

CONFIGS = {
    "benchmark model (hidden 64, seq 16)": ["--layers", "8", "--hidden", "64", "--seq-len", "16"],
    "benchmark model + record_shapes": ["--layers", "8", "--hidden", "64", "--seq-len", "16", "--record-shapes"],
    "default model (hidden 256, seq 64)": ["--layers", "8"],
    "default model + record_shapes + profile_memory": ["--layers", "8", "--record-shapes", "--profile-memory"],
}


def run(extra: list[str], warmup: int, steps: int) -> tuple[list[float], list[float]]:
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "pipeaudit", "profile", "--schedule", "1f1b", "-P", "4", "-M", "16",
               "--warmup-steps", str(warmup), "--steps", str(steps), "--out", out, "--force", *extra]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
        subprocess.run(cmd, check=True, env=env, cwd=ROOT, capture_output=True)
        m = json.loads((Path(out) / "manifest.json").read_text())
    return m["warmup_step_wall_s"][2:], m["step_wall_s"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--warmup", type=int, default=12)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("| configuration | unprofiled step ms (median) | profiled step ms (median) | overhead |")
    print("|---|---:|---:|---:|")
    for name, extra in CONFIGS.items():
        plain: list[float] = []
        prof: list[float] = []
        for _ in range(args.repeat):
            a, b = run(extra, args.warmup, args.steps)
            plain += a
            prof += b
        mp, mq = statistics.median(plain) * 1e3, statistics.median(prof) * 1e3
        print(f"| {name} | {mp:.1f} | {mq:.1f} | {100 * (mq / mp - 1):+.0f} % |", flush=True)
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
