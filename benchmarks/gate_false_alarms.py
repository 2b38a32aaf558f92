"""How often the gate fails an unchanged rerun on a busy host, and whether it still catches a
slowed stage: ``pipeaudit gate`` and ``pipeaudit watch --gate``.

    python benchmarks/gate_false_alarms.py                  # 20 reruns, a CPU hog beside them
    python benchmarks/gate_false_alarms.py --runs 5 --no-hog --out /tmp/fa

A CPU-bound process (``while True: pass``, started here and killed at the end) runs on the
same cores for the whole measurement. The harness (``pipeaudit profile``: real
torch.distributed.pipelining 1F1B over gloo, ``-P``/``-M``/``--steps`` small) profiles a
baseline (``pipeaudit baseline``), then ``--runs`` unchanged reruns, each gated against it
(``pipeaudit gate RUN --baseline``, default thresholds, ``--no-config``), and all of them
again through ``pipeaudit watch RERUNS --gate BASELINE --once``, which gates each run's folder
as a window. A run with one stage made ``--slow`` times heavier (``--imbalance``, profiled
right after the baseline) is gated both ways. ``--regate`` gates the runs of an earlier
``--out`` again (after a change to the gate). Written: ``OUT/false_alarms.json`` (every run's exit code, failed checks and notes)
and a summary on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def pipeaudit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeaudit", *args], capture_output=True,
                          text=True)


def profile(out: Path, args: argparse.Namespace, *extra: str) -> float:
    """Profile one run into ``out``; its wall time (s)."""
    t = time.monotonic()
    p = pipeaudit("profile", "-P", str(args.ranks), "-M", str(args.microbatches), "--layers",
                  str(args.layers), "--hidden", str(args.hidden), "--steps", str(args.steps),
                  "--threads", "1", "-o", str(out), "--force", *extra)
    if p.returncode != 0:
        raise SystemExit(f"profile {out} failed ({p.returncode}): {p.stderr.strip()[-400:]}")
    return time.monotonic() - t


def gate_one(run: Path, base: Path) -> dict:
    p = pipeaudit("gate", str(run), "--baseline", str(base), "--no-config", "--format", "json")
    if p.returncode not in (0, 1):
        raise SystemExit(f"gate {run} exited {p.returncode}: {p.stderr.strip()}")
    doc = json.loads(p.stdout)
    return {"run": run.name, "exit_code": p.returncode, "verdict": doc["verdict"],
            "failed": [c["explanation"] for c in doc["checks"] if c["verdict"] == "fail"],
            "warned": [c["name"] for c in doc["checks"] if c["verdict"] == "warn"],
            "cleared": [c["name"] for c in doc["checks"] if c.get("cleared")],
            "step_time_change": next(c["change"] for c in doc["checks"]
                                     if c["metric"] == "step_time"),
            "notes": doc["notes"]}


def watch_all(folder: Path, base: Path) -> dict:
    """``watch FOLDER --gate BASE --once``: its exit code and each window's verdict."""
    p = pipeaudit("watch", str(folder), "--gate", str(base), "--once", "--format", "json")
    if p.returncode not in (0, 1):
        raise SystemExit(f"watch {folder} exited {p.returncode}: {p.stderr.strip()}")
    doc = json.loads(p.stdout)
    windows = [{"label": w["label"], "verdict": (w.get("gate") or {}).get("verdict"),
                "failed": [c["explanation"] for c in (w.get("gate") or {}).get("failed", [])]}
               for w in doc["windows"]]
    return {"exit_code": p.returncode, "windows": windows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--no-hog", action="store_true", help="no CPU-bound process beside the runs")
    ap.add_argument("-P", "--ranks", type=int, default=2)
    ap.add_argument("-M", "--microbatches", type=int, default=4)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--slow", default="1=2", help="the slowed run's --imbalance STAGE=FACTOR")
    ap.add_argument("--regate", action="store_true",
                    help="gate the runs already in --out again (no profiling, no hog)")
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="gate_false_alarms_"))
    out.mkdir(parents=True, exist_ok=True)
    if args.regate:
        old = json.loads((out / "false_alarms.json").read_text())
        record = {**old, **gate_all(out, args)}
    else:
        hog = None if args.no_hog else subprocess.Popen([sys.executable, "-c",
                                                         "while True: pass"])
        try:
            record = measure(out, args)
        finally:
            if hog is not None:
                hog.kill()
                hog.wait()
        record["hog"] = hog is not None
    (out / "false_alarms.json").write_text(json.dumps(record, indent=1) + "\n")
    summary(record, out)


def measure(out: Path, args: argparse.Namespace) -> dict:
    """Profile the baseline, the slowed run (right after it) and the reruns; gate them."""
    base_dir, reruns, slowed = out / "baseline", out / "reruns", out / "slowed"
    reruns.mkdir(exist_ok=True)
    slowed.mkdir(exist_ok=True)
    walls = [profile(base_dir, args)]
    walls.append(profile(slowed / f"slow_{args.slow.replace('=', 'x')}", args,
                         "--imbalance", args.slow))
    for i in range(args.runs):
        walls.append(profile(reruns / f"run_{i:02d}", args))
        print(f"profiled run_{i:02d} ({walls[-1]:.0f} s)", flush=True)
    return {"options": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "profile_wall_s": walls, "load_1min": os.getloadavg()[0], **gate_all(out, args)}


def gate_all(out: Path, args: argparse.Namespace) -> dict:
    """Gate every rerun and the slowed run against the baseline, with gate and watch."""
    base = out / "baseline.json"
    p = pipeaudit("baseline", str(out / "baseline"), "-o", str(base), "--force")
    if p.returncode != 0:
        raise SystemExit(f"baseline failed: {p.stderr.strip()}")
    gates = []
    for run in sorted((out / "reruns").iterdir()):
        gates.append(gate_one(run, base))
        g = gates[-1]
        print(f"{run.name}: exit {g['exit_code']}, step time {100 * g['step_time_change']:+.1f}%"
              + (f", failed: {'; '.join(g['failed'])}" if g["failed"] else ""), flush=True)
    slow_run = next((out / "slowed").iterdir())
    return {"gate": gates, "watch": watch_all(out / "reruns", base),
            "slowed_gate": gate_one(slow_run, base), "slowed_watch": watch_all(out / "slowed", base)}


def summary(r: dict, out: Path) -> None:
    n = len(r["gate"])
    gate_fa = sum(g["exit_code"] == 1 for g in r["gate"])
    watch_fa = sum(w["verdict"] == "fail" for w in r["watch"]["windows"])
    changes = sorted(100 * g["step_time_change"] for g in r["gate"])
    print(f"\n{n} unchanged reruns (P={r['options']['ranks']}, M={r['options']['microbatches']}, "
          f"{r['options']['steps']} steps){' beside a CPU hog' if r['hog'] else ''}, "
          f"load {r['load_1min']:.1f}: step time {changes[0]:+.1f}% to {changes[-1]:+.1f}% "
          "against the baseline")
    print(f"gate false alarms: {gate_fa}/{n}; watch --gate false alarms: {watch_fa}/"
          f"{len(r['watch']['windows'])} (watch exit {r['watch']['exit_code']})")
    notes = sum(any("host looks" in x for x in g["notes"]) for g in r["gate"])
    print(f"reruns with the host note: {notes}/{n}; cleared rises: "
          f"{sum(bool(g['cleared']) for g in r['gate'])}/{n}; warned: "
          f"{sum(bool(g['warned']) for g in r['gate'])}/{n}")
    sg, sw = r["slowed_gate"], r["slowed_watch"]
    print(f"slowed stage ({r['options']['slow']}): gate exit {sg['exit_code']}, watch exit "
          f"{sw['exit_code']}; " + "; ".join(sg["failed"][:2]))
    print(f"details: {out / 'false_alarms.json'}")


if __name__ == "__main__":
    main()
