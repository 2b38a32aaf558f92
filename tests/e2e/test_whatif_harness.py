"""whatif against real harness runs: predict one configuration from a trace of another.

Five real runs of the small model (P=2, gloo on CPU, same global batch of 32): 1F1B at M=4,
1F1B at M=8, GPipe at M=4, interleaved 1F1B (v=2) at M=4, and 1F1B at M=4 again. Predicted:
1F1B M=4 -> M=8, GPipe -> 1F1B, 1F1B -> interleaved; each is compared with the measured run
(median step time over its steps).

Noise: two ranks share this machine's cores with whatever else runs, so the *speed of the
machine* changes between runs (on a loaded 2-core box two identical runs differed by up to
66%). No model of the pipeline can predict that. The test therefore measures it (the two
identical 1F1B M=4 runs bracket the others) and checks two things:

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
  compute per step, and k within 5%): the model's calibration on the source run and the raw
  prediction are within 10%, the scaled one within 15%, and the bubble within 0.05, except
  that a prediction onto another torch runtime (1F1B -> interleaved: `_PipelineScheduleRuntime`
  after `PipelineScheduleSingle`) may under-predict the bubble by up to 0.10. The model keeps
  the source run's host gap per action, and the action runtime's gaps are longer (its stated
  assumption; docs/explain.md): the bubble then comes out low, never high (a 2-core CI machine:
  predicted .169, measured .227, with identical runs within 2.4% / 4.0% and k = 1.00).
  Otherwise the figures are reported as a warning: a machine whose own speed swings by more
  than the tolerance cannot measure a 10% prediction error.

docs/explain.md lists the errors achieved.
"""

from __future__ import annotations

import warnings

import pytest

import pipeaudit
from pipeaudit.explain import Changes, whatif
from pipeaudit.schedules.catalogue import canonical_name, torch_runtime

pytestmark = [pytest.mark.slow, pytest.mark.exclusive]

STEADY = 0.05  # identical runs within this: the machine ran at one speed
TOL = 0.10
BUBBLE_TOL = 0.05
RUNTIME_GAP_TOL = 0.05  # more under-prediction of the bubble allowed across torch runtimes
SCALED_TOL = 0.15
UNSTEADY_SCALED_TOL = 0.25
UNSTEADY_BUBBLE_TOL = 0.10
SAME_DURATIONS = 0.15  # |k - 1| within this: the bubble is compared at UNSTEADY_BUBBLE_TOL
RUNS = {  # name -> (schedule, M); run in this order, the identical pair brackets the rest
    "1f1b_m4": ("1f1b", 4),
    "1f1b_m8": ("1f1b", 8),
    "gpipe_m4": ("gpipe", 4),
    "interleaved_m4": ("interleaved-1f1b", 4),
    "1f1b_m4_again": ("1f1b", 4),
}
PREDICTIONS = [  # (source, target, changes)
    ("1f1b_m4", "1f1b_m8", Changes(microbatches=8)),
    ("gpipe_m4", "1f1b_m4", Changes(schedule="1f1b")),
    ("1f1b_m4", "interleaved_m4", Changes(schedule="interleaved-1f1b")),
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    pytest.importorskip("torch")
    from pipeaudit.harness import ModelConfig, ProfileConfig, run_profile

    base = tmp_path_factory.mktemp("whatif_runs")
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


def other_runtime(src: str, dst: str) -> bool:
    """Whether the two runs' schedules execute on different torch runtimes."""
    a, b = (torch_runtime(canonical_name(RUNS[name][0])) for name in (src, dst))
    return a != b


def steadiness(runs) -> tuple[float, float]:
    (ra, a), (rb, b) = runs["1f1b_m4"], runs["1f1b_m4_again"]
    return b.step_time_us / a.step_time_us - 1, work_per_step(rb) / work_per_step(ra) - 1


@pytest.mark.parametrize("src,dst,changes", PREDICTIONS,
                         ids=[f"{s}->{d}" for s, d, _ in PREDICTIONS])
def test_prediction_matches_the_measured_run(runs, src, dst, changes):
    run, res = runs[src]
    target_run, target = runs[dst]
    pred = whatif(run.timeline, changes, res)
    assert pred.model == "typical values"
    k = work_per_step(target_run) / work_per_step(run)
    raw = pred.predicted_step_time_us / target.step_time_us - 1
    scaled = pred.predicted_step_time_us * k / target.step_time_us - 1
    d_bubble = pred.predicted_bubble - target.bubble.measured
    step_noise, work_noise = steadiness(runs)
    report = (f"{src} -> {dst}: predicted {pred.predicted_step_time_us / 1e3:.1f} ms, measured "
              f"{target.step_time_us / 1e3:.1f} ms (raw {raw:+.1%}; speed ratio k={k:.2f}, "
              f"scaled {scaled:+.1%}); bubble {pred.predicted_bubble:.3f} vs "
              f"{target.bubble.measured:.3f}; identical runs differ by {step_noise:+.1%} in step "
              f"time, {work_noise:+.1%} in work")
    report += f"; calibration error {pred.calibration['error']:+.1%}"
    print(report)
    assert abs(scaled) <= UNSTEADY_SCALED_TOL + max(abs(step_noise), abs(work_noise)), report
    if abs(k - 1) <= SAME_DURATIONS:
        assert abs(d_bubble) <= UNSTEADY_BUBBLE_TOL, report
    if abs(step_noise) <= STEADY and abs(work_noise) <= STEADY and abs(k - 1) <= STEADY:
        assert abs(pred.calibration["error"]) < TOL, report
        assert abs(scaled) <= SCALED_TOL, report
        assert abs(raw) <= TOL, report
        low = BUBBLE_TOL + (RUNTIME_GAP_TOL if other_runtime(src, dst) else 0.0)
        assert -low <= d_bubble <= BUBBLE_TOL, report
    else:
        warnings.warn(f"machine not steady or durations changed, raw step time not checked: "
                      f"{report}", stacklevel=1)


def test_unchanged_whatif_is_each_measured_run(runs):
    for name, (run, res) in runs.items():
        pred = whatif(run.timeline, Changes(), res)
        assert pred.predicted_step_time_us == pytest.approx(res.step_time_us, rel=1e-9), name
        assert pred.predicted_bubble == pytest.approx(res.bubble.measured, abs=1e-6), name
