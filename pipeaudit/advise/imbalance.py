"""What a ``STAGE_IMBALANCE`` finding can say when the run's layers per stage are known (the
manifest's ``stage_layers``): the split of the layers ``pipeaudit advise`` proposes at the run's
own schedule, v and M, and its gain, both replayed by ``whatif``.

The numbers are ``advise``'s own (its "layer split at the measured schedule, v and M" note):
its search and replays restricted to the run's schedule and M, which costs a replay per split
tried (at most a few hundred; 0.1-0.6 s on the bundled runs with 8 layers), paid only by a run
with a stage imbalance whose manifest says how many layers each stage held.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from pipeaudit.audit.findings import IMBALANCE_ADVICE
from pipeaudit.audit.result import AuditResult
from pipeaudit.errors import PipeauditError
from pipeaudit.timeline.model import Timeline

#: a split predicted at most this much faster than the run's is no gain worth naming
MIN_GAIN = 0.005


@dataclass(frozen=True)
class SplitGain:
    """The run's split of the layers and the best one the search proposes, each replayed."""

    run_split: tuple[int, ...]
    split: tuple[int, ...]
    run_us: float  #: the run's split, predicted by the same replay (the calibration)
    split_us: float

    @property
    def gain(self) -> float:
        """The predicted saving, as a fraction of the run's predicted step time."""
        return 1.0 - self.split_us / self.run_us if self.run_us > 0 else 0.0


class _Measured:
    """The run as :func:`pipeaudit.advise.advise` reads it (its timeline and audit), for a
    caller that holds the audit before the run does."""

    def __init__(self, tl: Timeline, result: AuditResult) -> None:
        self.timeline, self._result = tl, result

    def audit(self) -> AuditResult:
        return self._result


def split_gain(tl: Timeline, result: AuditResult) -> SplitGain | None:
    """The best split of the run's layers over its stages at its schedule, v and M, against its
    own, as ``pipeaudit advise`` finds it (the same search and replays, restricted to the run's
    configuration, no memory cap); None when the layers per stage are not known, the schedule
    is not recognised, ranks are missing, the job has several pipelines, or advise cannot run."""
    from pipeaudit.advise.advise import advise
    from pipeaudit.explain.layers import manifest_layers

    if (result.schedule is None or result.ranks_missing or len(result.pipelines) > 1
            or not result.pipeline_found or result.num_microbatches is None):
        return None
    old = manifest_layers(tl.manifest, result.num_stages)
    if old is None:
        return None
    run_split = tuple(old)
    if sum(old) == len(old):  # one layer per stage: nothing to move
        return SplitGain(run_split, run_split, result.step_time_us, result.step_time_us)
    try:
        advice = advise(_Measured(tl, result), schedules=[result.schedule],
                        microbatches=[result.num_microbatches])
    except PipeauditError:
        return None
    v = max(1, result.num_stages // result.num_ranks)
    base = next((c for c in advice.candidates if c.measured), None)
    same = [c for c in advice.candidates if not c.measured and c.stage_layers is not None
            and (c.chunks, c.microbatches) == (v, result.num_microbatches)
            and len(c.stage_layers) == len(run_split)]
    if base is None:
        return None
    run_us = base.predicted_step_time_us
    best = min(same, key=lambda c: c.predicted_step_time_us, default=None)
    if best is None or best.predicted_step_time_us >= run_us * (1 - MIN_GAIN):
        return SplitGain(run_split, run_split, run_us, run_us)
    return SplitGain(run_split, tuple(best.stage_layers), run_us, best.predicted_step_time_us)


def advice_sentence(stage: int, g: SplitGain) -> str:
    """The end of the finding: the split ``advise`` proposes and its gain, or why none."""
    def text(split: tuple[int, ...]) -> str:
        return ",".join(map(str, split))

    if g.split != g.run_split:
        return (f"`pipeaudit advise` proposes the layers {text(g.split)} per stage (the run's: "
                f"{text(g.run_split)}), predicted {g.gain:.1%} faster ({g.split_us / 1000:.1f} ms "
                f"per step against {g.run_us / 1000:.1f} ms replayed for the run's split).")
    if sum(g.run_split) == len(g.run_split):
        return (f"with one layer per stage (manifest) no split can move work off it; `pipeaudit "
                f"whatif --scale {stage}=FACTOR` predicts what making it faster buys.")
    return (f"no other split of the layers ({text(g.run_split)} per stage) is predicted faster "
            f"(`pipeaudit advise` searches schedules and M too; `pipeaudit whatif --scale "
            f"{stage}=FACTOR` predicts what making it faster buys).")


def with_split_advice(tl: Timeline, result: AuditResult) -> AuditResult:
    """``result`` with each ``STAGE_IMBALANCE`` finding ending in :func:`advice_sentence`
    where the layers are known (unchanged otherwise)."""
    if not any(f.code == "STAGE_IMBALANCE" and f.message.endswith(IMBALANCE_ADVICE)
               for f in result.findings):
        return result
    g = split_gain(tl, result)
    if g is None:
        return result
    findings = [dataclasses.replace(f, message=f.message.removesuffix(IMBALANCE_ADVICE)
                                    + advice_sentence(f.stage, g))
                if f.code == "STAGE_IMBALANCE" and f.stage is not None
                and f.message.endswith(IMBALANCE_ADVICE) else f
                for f in result.findings]
    return dataclasses.replace(result, findings=findings)
