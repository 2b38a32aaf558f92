"""How right is ``pipeaudit whatif``? Real harness runs, predicted from one another.

Each sequence makes five real runs of the small model (P=2, gloo on CPU, the same global batch
of 32), in this order: 1F1B at M=4, 1F1B at M=8, GPipe at M=4, interleaved 1F1B (v=2) at M=4,
and 1F1B at M=4 again. It predicts 1F1B M=4 -> M=8, GPipe -> 1F1B and 1F1B -> interleaved, and
compares each with the measured run (median step time over its steps).

The machine's own speed moves between runs (other jobs, a VM's stolen time): the identical
1F1B runs that bracket the others measure it, and k, the ratio of the two runs' compute per
step (the same work), scales the prediction to the speed the measured run saw. A row gives
the raw error, k, the scaled error and the predicted against the measured bubble.

    python benchmarks/whatif_accuracy.py --out DIR --sequences 3 [--json out.json]

tests/e2e/test_whatif_harness.py runs one sequence and asserts what the machine's noise
cannot move; docs/explain.md keeps the figures of these sequences.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

#: name -> (schedule, M); run in this order, the identical pair brackets the rest
RUNS = {
    "1f1b_m4": ("1f1b", 4),
    "1f1b_m8": ("1f1b", 8),
    "gpipe_m4": ("gpipe", 4),
    "interleaved_m4": ("interleaved-1f1b", 4),
    "1f1b_m4_again": ("1f1b", 4),
}
#: (source, target, what changes): each predicted from the source run's trace
PREDICTIONS = [
    ("1f1b_m4", "1f1b_m8", {"microbatches": 8}),
    ("gpipe_m4", "1f1b_m4", {"schedule": "1f1b"}),
    ("1f1b_m4", "interleaved_m4", {"schedule": "interleaved-1f1b"}),
]


@dataclass
class Prediction:
    """One prediction against its measured run."""

    source: str
    target: str
    predicted_ms: float
    measured_ms: float
    raw: float  #: predicted / measured step time - 1
    k: float  #: compute per step of the measured run / of the source run
    scaled: float  #: predicted x k / measured - 1
    predicted_bubble: float
    measured_bubble: float
    calibration: float  #: the model's error on the source run itself

    @property
    def bubble_error(self) -> float:
        return self.predicted_bubble - self.measured_bubble

    def line(self) -> str:
        return (f"{self.source} -> {self.target}: predicted {self.predicted_ms:.1f} ms, measured "
                f"{self.measured_ms:.1f} ms (raw {self.raw:+.1%}; speed ratio k={self.k:.2f}, "
                f"scaled {self.scaled:+.1%}); bubble {self.predicted_bubble:.3f} vs "
                f"{self.measured_bubble:.3f}; calibration error {self.calibration:+.1%}")


def make_runs(base: Path) -> dict:
    """The five runs of one sequence under ``base``: name -> (run, audit)."""
    import pipeaudit
    from pipeaudit.harness import ModelConfig, ProfileConfig, run_profile

    out = {}
    for name, (schedule, M) in RUNS.items():
        cfg = ProfileConfig(out=str(base / name), schedule=schedule, stages=2, microbatches=M,
                            steps=4, warmup_steps=1, progress=False,
                            model=ModelConfig(layers=4, hidden=256, seq_len=256, batch_size=32))
        run_profile(cfg.validate())
        run = pipeaudit.load(base / name)
        out[name] = (run, run.audit())
    return out


def work_per_step(run) -> float:
    """Compute time of all actions per step (ns): the same work in every run here."""
    a = run.timeline.actions
    return float(a["compute_ns"].sum()) / a["step"].n_unique()


def steadiness(runs: dict) -> tuple[float, float]:
    """How far the two identical runs differ: in step time, in compute per step."""
    (ra, a), (rb, b) = runs["1f1b_m4"], runs["1f1b_m4_again"]
    return b.step_time_us / a.step_time_us - 1, work_per_step(rb) / work_per_step(ra) - 1


def predict(runs: dict, source: str, target: str, changes: dict) -> Prediction:
    """Predict ``target`` from ``source``'s trace and hold it to the measured run."""
    from pipeaudit.explain import Changes, whatif

    run, res = runs[source]
    target_run, measured = runs[target]
    pred = whatif(run.timeline, Changes(**changes), res)
    k = work_per_step(target_run) / work_per_step(run)
    return Prediction(source, target, pred.predicted_step_time_us / 1e3,
                      measured.step_time_us / 1e3,
                      pred.predicted_step_time_us / measured.step_time_us - 1, k,
                      pred.predicted_step_time_us * k / measured.step_time_us - 1,
                      pred.predicted_bubble, measured.bubble.measured,
                      pred.calibration["error"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder for the runs' traces")
    ap.add_argument("--sequences", type=int, default=1)
    ap.add_argument("--json", default="", help="also write every figure here")
    a = ap.parse_args(argv)
    rows = []
    for n in range(a.sequences):
        runs = make_runs(Path(a.out) / f"sequence{n}")
        step_noise, work_noise = steadiness(runs)
        preds = [predict(runs, s, t, c) for s, t, c in PREDICTIONS]
        print(f"sequence {n}: identical runs differ by {step_noise:+.1%} in step time, "
              f"{work_noise:+.1%} in work")
        for p in preds:
            print(f"  {p.line()}")
        rows.append({"identical_step": step_noise, "identical_work": work_noise,
                     "predictions": [asdict(p) for p in preds]})
    every = [p for r in rows for p in r["predictions"]]
    print(f"{len(every)} predictions: worst scaled step-time error "
          f"{max(abs(p['scaled']) for p in every):.1%}, worst bubble error "
          f"{max(abs(p['predicted_bubble'] - p['measured_bubble']) for p in every):.3f}")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
