"""whatif against real harness runs: predict one configuration from a trace of another.

Five real runs of the small model (P=2, gloo on CPU, same global batch of 32): 1F1B at M=4,
1F1B at M=8, GPipe at M=4, interleaved 1F1B (v=2) at M=4, and 1F1B at M=4 again. Predicted:
1F1B M=4 -> M=8, GPipe -> 1F1B, 1F1B -> interleaved; each is compared with the measured run
(median step time over its steps).

Noise: two ranks share this machine's cores with whatever else runs, so the *speed of the
machine* changes between runs (on a loaded 2-core box two identical runs differed by up to
66%). No model of the pipeline can predict that. The test therefore measures it (the two
identical 1F1B M=4 runs bracket the others) and checks three things:

* always: the prediction scaled by the measured speed ratio k of the two runs (compute per
  step of the measured run / of the source run; same model and global batch, so the same
  work) is within 25% of the measured step time, plus the machine's own measured
  irreproducibility (the larger of the identical runs' differences in step time and in
  work). This tests the pipeline model (order, dependencies, communication, host gaps), not
  the machine's load; host gaps and transfers do not slow down exactly like compute (worst
  seen with other jobs loading the 2 cores: 15.9%, when two identical runs differed by 43%;
  on a VM whose host stole 38% of its CPU time, 37.5% when they differed by 34% in step
  time and 47% in work: k, a mean over the run, cannot follow a speed that swings within
  it);
* when the actions took about as long in both runs (|k - 1| <= 15%, the model's premise):
  the predicted bubble within 0.10. When they did not, the ranks competed for the cores
  differently in the two runs (interleaved 1F1B moves three times the activations of 1F1B
  over gloo, and on a 2-core CI box its compute once ran 25% slower than 1F1B's while two
  identical 1F1B runs agreed within 1%): compute then slowed where both ranks were busy and
  not in the bubble, so the bubble is no longer free of the machine's speed (that run:
  predicted .142, measured .253);
* when the machine was steady (the identical runs agree within 5% in step time and in
  compute per step, and k within 5%): the model's calibration on the source run within 10%
  and the scaled prediction within 15%.

The raw step-time error and a bubble within 0.05 are accuracy figures, not bounds: on a steady
2-core CI machine a 1F1B M=4 -> M=8 prediction once came 0.058 under the measured bubble (and
a raw error of 10% is a scaled one of 5% at k = 0.95). benchmarks/whatif_accuracy.py measures
them over several sequences; docs/explain.md lists them.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest

from pipeaudit.explain import Changes, whatif

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
try:
    from whatif_accuracy import PREDICTIONS, make_runs, predict, steadiness
finally:
    sys.path.pop(0)

pytestmark = [pytest.mark.slow, pytest.mark.exclusive]

STEADY = 0.05  # identical runs within this: the machine ran at one speed
TOL = 0.10
SCALED_TOL = 0.15
UNSTEADY_SCALED_TOL = 0.25
UNSTEADY_BUBBLE_TOL = 0.10
SAME_DURATIONS = 0.15  # |k - 1| within this: the bubble is compared at UNSTEADY_BUBBLE_TOL


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    pytest.importorskip("torch")
    return make_runs(tmp_path_factory.mktemp("whatif_runs"))


@pytest.mark.parametrize("src,dst,changes", PREDICTIONS,
                         ids=[f"{s}->{d}" for s, d, _ in PREDICTIONS])
def test_prediction_matches_the_measured_run(runs, src, dst, changes):
    p = predict(runs, src, dst, changes)
    step_noise, work_noise = steadiness(runs)
    report = (f"{p.line()}; identical runs differ by {step_noise:+.1%} in step time, "
              f"{work_noise:+.1%} in work")
    print(report)
    assert abs(p.scaled) <= UNSTEADY_SCALED_TOL + max(abs(step_noise), abs(work_noise)), report
    if abs(p.k - 1) <= SAME_DURATIONS:
        assert abs(p.bubble_error) <= UNSTEADY_BUBBLE_TOL, report
    if abs(step_noise) <= STEADY and abs(work_noise) <= STEADY and abs(p.k - 1) <= STEADY:
        assert abs(p.calibration) < TOL, report
        assert abs(p.scaled) <= SCALED_TOL, report
    else:
        warnings.warn(f"machine not steady or durations changed, the steady machine's bounds "
                      f"not checked: {report}", stacklevel=1)


def test_unchanged_whatif_is_each_measured_run(runs):
    for name, (run, res) in runs.items():
        pred = whatif(run.timeline, Changes(), res)
        assert pred.predicted_step_time_us == pytest.approx(res.step_time_us, rel=1e-9), name
        assert pred.predicted_bubble == pytest.approx(res.bubble.measured, abs=1e-6), name
