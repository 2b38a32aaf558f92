"""What two processes give on this machine for pipeaudit's per-rank work, with no serial part.

    python benchmarks/two_cores.py [--file benchmarks/data/size_x4/rank1.json.gz] [--repeat 5]

Runs the per-rank task (streamed decode with the compiled scanner + ``reduce_rank``, as
``analyze`` does in each worker) on the same rank file twice: one process doing both, one
after the other, against two processes doing one each at the same time. The ratio is the
ceiling of ``--jobs 2`` against ``--jobs 1`` for the ranks phase on this machine (two
vCPUs of a VM may share a physical core, its caches and its memory bandwidth); the end-to-end
ratio of ``analyze`` is below it by the run's serial part (interpreter, imports, audit,
report). Each arm is timed inside the processes (imports excluded), best of ``--repeat``,
alternating the arms.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from run import cpu_ticks  # benchmarks/run.py, beside this script

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

_TASK = """
import sys, time
sys.path.insert(0, {root!r})
from pipeaudit.timeline.build import REDUCE_COLUMNS, reduce_trace
from pipeaudit.trace.decode import read_trace
from pipeaudit.trace import scanner
assert scanner.available(), "the compiled scanner is not built"
# wait for the start signal (a file), so that both processes start together after imports
while not __import__("os").path.exists({go!r}):
    time.sleep(0.001)
t = time.perf_counter()
for _ in range({n}):
    tr = read_trace({path!r}, columns=REDUCE_COLUMNS, max_memory=1 << 30)
    reduce_trace(tr, hints={{}}, pattern=None)
    del tr
print(time.perf_counter() - t)
"""


def arm(path: str, procs: int, per_proc: int, go: Path) -> float:
    """Wall time of ``procs`` processes each running the task ``per_proc`` times at once."""
    if go.exists():
        go.unlink()
    code = _TASK.format(root=str(ROOT), go=str(go), n=per_proc, path=path)
    ps = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
          for _ in range(procs)]
    time.sleep(1.5)  # the imports
    go.touch()
    times = [float(p.communicate()[0]) for p in ps]
    go.unlink()
    return max(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--file", default=str(HERE / "data" / "size_x4" / "rank1.json.gz"))
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    go = Path(f"/tmp/pipeaudit-two-cores-{os.getpid()}")
    ticks0 = cpu_ticks()
    one, two = [], []
    for _ in range(args.repeat):
        one.append(arm(args.file, 1, 2, go))
        two.append(arm(args.file, 2, 1, go))
    print(f"file {args.file}")
    print(f"one process, two ranks one after the other: {' '.join(f'{x:.2f}' for x in one)} s")
    print(f"two processes, one rank each, at once:      {' '.join(f'{x:.2f}' for x in two)} s")
    print(f"ceiling of jobs 2 / jobs 1 for the ranks phase: best {min(one) / min(two):.2f}x, "
          f"median {sorted(one)[len(one) // 2] / sorted(two)[len(two) // 2]:.2f}x")
    total, steal = (a - b for a, b in zip(cpu_ticks(), ticks0))
    print(f"CPU time stolen by the VM's host meanwhile: {100 * steal / max(total, 1):.1f}%")


if __name__ == "__main__":
    main()
