"""Findings: deviations from theory and from the schedule, each with one sentence of explanation.

Thresholds are module constants so that reports can quote them; the gate has
its own configurable thresholds.
"""

from __future__ import annotations

from pipeaudit.audit.result import Finding

BUBBLE_OVER_THEORY_WARN = 0.02  # absolute fraction of the step
BUBBLE_OVER_THEORY_ERROR = 0.10
IMBALANCE_RATIO = 1.15  # a stage's compute per step vs the median stage
OVERHEAD_WARN = 0.03  # measured - replay ideal bubble
OUTLIER_FACTOR = 2.0  # a rank's overhead vs the median rank's
STRAGGLER_FACTOR = 2.0  # a rank's start delays vs the median rank
STRAGGLER_MIN_SHARE = 0.03  # ... and at least this share of the step
#: how STAGE_IMBALANCE ends when the layers per stage are not known; where they are,
#: :func:`pipeaudit.advise.imbalance.with_split_advice` puts the proposed split and its gain
IMBALANCE_ADVICE = "`pipeaudit advise` proposes a split of the layers and predicts its gain."


def _host_gaps(device: str) -> str:
    """What a shared device's time outside the stages' compute is made of."""
    return (f"the program's own overhead: {device} waits while the process issues the next "
            "action (Python, kernel launches, copies between stages; one process has no "
            "communication)")


def bubble_above_theory(measured: float, theory: float, formula: str, ideal: float | None,
                        shared_device: str | None = None) -> Finding | None:
    """Pipeline bubble above the closed form, with the replay split when known;
    ``shared_device``: the one device the stages took turns on (single-process run)."""
    excess = measured - theory
    if excess <= BUBBLE_OVER_THEORY_WARN:
        return None
    severity = "error" if excess > BUBBLE_OVER_THEORY_ERROR else "warning"
    if ideal is not None:
        rest = (_host_gaps(shared_device) if shared_device is not None
                else "communication, waits and host overhead")
        why = (f"{ideal - theory:+.3f} of it comes from uneven stages and F/B/W durations "
               f"(replay ideal {ideal:.3f}) and {measured - ideal:+.3f} from {rest}; "
               f"`pipeaudit explain` shows the critical path and which stage to speed up.")
    else:
        why = "`pipeaudit explain` shows the critical path and which stage to speed up."
    return Finding("BUBBLE_ABOVE_THEORY", severity, None, None, measured, theory,
                   f"Pipeline bubble {measured:.3f} is {excess:.3f} above theory {formula} = "
                   f"{theory:.3f}: {why}", unit="fraction")


def stage_imbalance(stage: int, rank: int, per_step_us: float, median_us: float) -> Finding | None:
    """A stage whose compute per step is well above the median stage."""
    if median_us <= 0:
        return None
    ratio = per_step_us / median_us
    if ratio < IMBALANCE_RATIO:
        return None
    return Finding("STAGE_IMBALANCE", "warning" if ratio < 1.5 else "error", rank, stage,
                   round(ratio, 3), 1.0,
                   f"Stage {stage} computes {per_step_us / 1000:.2f} ms per step, {ratio:.2f}x the "
                   f"median stage ({median_us / 1000:.2f} ms): every other stage waits for it; "
                   + IMBALANCE_ADVICE, unit="ratio")


def overhead_pipeline(measured: float | None, ideal: float | None, worst_rank: int,
                      shared_device: str | None = None) -> Finding | None:
    """Bubble beyond the replay of the observed order: communication, waits, host overhead
    (HOST_OVERHEAD when the stages took turns on ``shared_device``: there is no communication)."""
    if measured is None or ideal is None or measured - ideal <= OVERHEAD_WARN:
        return None
    gap = measured - ideal
    severity = "warning" if gap < 0.10 else "error"
    if shared_device is not None:
        return Finding("HOST_OVERHEAD", severity, None, None, round(measured, 4), round(ideal, 4),
                       f"The pipeline idles {gap:.3f} of the step more than its stages' compute "
                       f"run back to back on {shared_device} in the order issued: "
                       f"{_host_gaps(shared_device)}. Larger microbatches or fewer, larger "
                       f"kernels shrink it.", unit="fraction")
    return Finding("EXPOSED_COMMUNICATION", severity, None, None,
                   round(measured, 4), round(ideal, 4),
                   f"The pipeline idles {gap:.3f} of the step more than a replay of the observed order "
                   f"with measured compute and free communication (worst: rank {worst_rank}): "
                   f"transfers, recv waits or host overhead sit on the critical path "
                   f"(`pipeaudit explain` splits it into communication and host gaps).", unit="fraction")


def overhead(rank: int, gap: float, median_gap: float) -> Finding:
    """A rank whose overhead beyond the replay stands out from the others."""
    return Finding("EXPOSED_COMMUNICATION", "warning", rank, None, round(gap, 4), round(median_gap, 4),
                   f"Rank {rank} loses {gap:.3f} of the step to communication, waits or host overhead "
                   f"beyond the replay, against {median_gap:.3f} for the median rank: look at its "
                   f"links, its host and its launches.", unit="fraction")


def memory_above_theory(stage: int, rank: int, peak: int, expected: int) -> Finding | None:
    """More microbatches in flight on a stage than the schedule holds."""
    if peak <= expected:
        return None
    return Finding("MEMORY_ABOVE_THEORY", "warning", rank, stage, peak, expected,
                   f"Stage {stage} holds {peak} microbatches' activations at once where the schedule "
                   f"needs {expected}: its backward runs later than the schedule puts it.", unit="count")


def schedule_violation(schedule: str, rank: int, position: int, seen: str, expected: str) -> Finding:
    """The observed order contradicts the declared schedule."""
    return Finding("SCHEDULE_ORDER_VIOLATION", "error", rank, None, None, None,
                   f"Rank {rank} runs {seen} at position {position} where {schedule} runs {expected}: "
                   f"the run did not execute the declared schedule.")


def straggler(rank: int, delay_us: float, median_us: float, step_us: float) -> Finding | None:
    """A rank that starts its actions late although their inputs were ready."""
    if delay_us < STRAGGLER_FACTOR * max(median_us, 1e-9) or delay_us < STRAGGLER_MIN_SHARE * step_us:
        return None
    return Finding("STRAGGLER_RANK", "warning", rank, None, round(delay_us, 1), round(median_us, 1),
                   f"Rank {rank} starts its actions {delay_us / 1000:.2f} ms per step after their inputs "
                   f"were ready (median rank {median_us / 1000:.2f} ms): host overhead, slow "
                   f"launches or a busy CPU on that rank.", unit="us")


def missing_actions(stage: int, rank: int, step: int, missing: list[str]) -> Finding:
    """Actions the schedule needs that the trace does not have."""
    shown = ", ".join(missing[:8]) + (" …" if len(missing) > 8 else "")
    return Finding("MISSING_ACTIONS", "error", rank, stage, len(missing), 0,
                   f"Step {step} of stage {stage} lacks {len(missing)} actions ({shown}): the trace is "
                   f"incomplete or the step was cut; figures for this step are partial.", unit="count")


def duplicated_actions(stage: int, rank: int, step: int, dups: list[str]) -> Finding:
    """Actions seen more than once in one step."""
    shown = ", ".join(dups[:8]) + (" …" if len(dups) > 8 else "")
    return Finding("DUPLICATED_ACTIONS", "error", rank, stage, len(dups), 0,
                   f"Step {step} of stage {stage} runs {shown} more than once: traces from two runs, or "
                   f"steps not separated by ProfilerStep spans.", unit="count")


def truncated_trace(report) -> Finding:
    """A damaged trace read with ``--salvage`` (TRUNCATED_TRACE), or a failed harness rank's
    partial trace (PARTIAL_TRACE): what was recovered and which steps were excluded."""
    if report.kind == "partial":
        return Finding("PARTIAL_TRACE", "warning", report.rank, None, float(report.events_recovered),
                       None, f"The trace of rank {report.rank} ({report.file_name}) is {report.describe()}.", unit="count")
    return Finding("TRUNCATED_TRACE", "warning", report.rank, None, float(report.events_recovered),
                   None, f"The trace of rank {report.rank} ({report.file_name}) is damaged: "
                         f"{report.describe()}.", unit="count")


def missing_ranks(given: list[int], world_size: int) -> Finding:
    """Ranks of the run whose traces were not given: the figures cover the others only."""
    from pipeaudit.trace.validate import format_gaps, format_ranks, missing_gaps

    missing = format_gaps(missing_gaps(given, 0, world_size - 1))
    return Finding("MISSING_RANKS", "warning", None, None, len(given), world_size,
                   f"Only {len(given)} of {world_size} ranks are in the traces (missing "
                   f"{missing}): the figures cover rank{'s' if len(given) > 1 else ''} "
                   f"{format_ranks(given)} only; "
                   "the stages on the missing ranks are not audited.", unit="count")


def no_actions(rank: int, position: int | None, source: str) -> Finding:
    """A rank of the pipeline whose trace holds no action that could be found."""
    where = f" (stage position {position})" if position is not None else ""
    return Finding("NO_ACTIONS_FOUND", "error", rank, None, 0, None,
                   f"Rank {rank}{where} has a trace but no pipeline action could be found in it "
                   f"(no PP:/Forward/Backward annotation and no F/B inferable from its ops): its "
                   "stage is missing from every figure; profile with the pipeline annotations or "
                   "give --action-pattern.", unit="count")


def slow_replica(pipeline: int, stage: int | None, step_us: float, median_us: float) -> Finding:
    """The pipeline replica whose steps are longest: the data-parallel sync waits for it."""
    where = f", stage {stage} the slowest of it" if stage is not None else ""
    return Finding("SLOW_PIPELINE_REPLICA", "warning", None, stage, round(step_us, 1),
                   round(median_us, 1),
                   f"Pipeline replica {pipeline} takes {step_us / 1000:.2f} ms per step against "
                   f"{median_us / 1000:.2f} ms for the median other replica{where}: every replica "
                   "waits for it at the data-parallel gradient sync, so it sets the job's step.", unit="us")


def slower_than_peers(rank: int, position: int, us: float, median_us: float, peers: int) -> Finding:
    """A rank that computes its stage more slowly than the same stage in other replicas."""
    return Finding("SLOWER_THAN_PEERS", "warning", rank, None, round(us, 1), round(median_us, 1),
                   f"Rank {rank} computes {us / 1000:.2f} ms per step at stage position {position}, "
                   f"{us / median_us:.2f}x the median of its {peers} peers in the other replicas "
                   f"({median_us / 1000:.2f} ms): the same work on slower hardware (a throttled "
                   "or shared device, a busy host).", unit="us")


def reading_uncertain(doubts) -> Finding:
    """The actions read from the ops break the structure every schedule has (or fit it more
    than one way), or the job's layout is a guess (:mod:`pipeaudit.timeline.invariants`): one
    warning for the run, naming the first rank."""
    from pipeaudit.timeline.invariants import doubt_message

    return Finding("READING_UNCERTAIN", "warning", doubts[0].rank, None, float(len(doubts)), 0.0,
                   doubt_message(doubts), unit="count")

