"""What a report says about the run beyond its numbers, in words shared by every format:
the job's layout, which ranks are there, what the steps and the actions were found from, and
what the bubble figure covers. Plain text; each reporter escapes and frames it."""

from __future__ import annotations

from pipeaudit.audit.result import AuditResult
from pipeaudit.report.formatting import ms, pct
from pipeaudit.timeline.invariants import layout_only


def one_process(r: AuditResult) -> bool:
    """True when one process drove every stage (one trace, several stages, no rank missing)."""
    return len(r.inputs) == 1 and r.num_ranks > 1 and not r.ranks_missing


def shape_text(r: AuditResult) -> str:
    """``P=4 ranks, 4 stages (v=1)``; ``one process, 4 stages (v=1)`` when one process drove
    them all; ``rank 0's trace of P=2 ranks, 2 stages (v=1)`` for one rank's file of a run."""
    if one_process(r):
        who = "one process"
    elif len(r.inputs) == 1 and r.ranks_missing:
        who = f"{_ranks(r.ranks_present)}'s trace of P={r.num_ranks} ranks"
    else:
        who = f"P={r.num_ranks} ranks"
    return f"{who}, {r.num_stages} stages (v={r.num_chunks})"


def _ranks(ranks: list[int]) -> str:
    """``rank 0`` or ``ranks 0, 2-3``."""
    return f"rank{'s' if len(ranks) > 1 else ''} {ranks_text(ranks)}"


def m_text(r: AuditResult) -> str:
    """M as read, or ``?`` when the reading is uncertain."""
    return "?" if r.num_microbatches is None else str(r.num_microbatches)


def uncertain_text(r: AuditResult) -> str | None:
    """The warning that the figures rest on a reading that broke the structure of every
    schedule or fits it more than one way (None when it held)."""
    if not r.uncertain:
        return None
    ranks = ", ".join(str(u["rank"]) for u in r.uncertain)
    if layout_only([u["reason"] for u in r.uncertain]):
        return (f"UNCERTAIN: which ranks form a pipeline is a guess for rank(s) {ranks} (process "
                "groups without names that the transfers do not place); schedule, M and theory "
                "are not given and the bubble figures may be wrong (READING_UNCERTAIN; --layout "
                "settles it)")
    return (f"UNCERTAIN: the actions read from the ops of rank(s) {ranks} do not settle what "
            "ran; schedule, M and theory are not given and the bubble figures "
            "may be wrong (READING_UNCERTAIN)")


def fact_lines(r: AuditResult) -> list[str]:
    """Sentences for the report's header (none for a plain annotated single pipeline)."""
    out = []
    lay = r.layout or {}
    if lay and (lay.get("dp", 1) > 1 or lay.get("tp", 1) > 1):
        dims = [f"pp={lay['pp']}"] + [f"{k}={lay[k]}" for k in ("dp", "tp") if lay.get(k, 1) > 1]
        out.append(f"layout {' x '.join(dims)} (from {lay.get('source')}): {len(r.pipelines)} "
                   f"pipeline replicas of {r.num_ranks} stage positions"
                   + (f", {lay['tp']} tensor-parallel ranks per stage" if lay.get("tp", 1) > 1 else ""))
    if r.ranks_missing:
        world = len(r.ranks_present) + len(r.ranks_missing)
        out.append(f"ranks present: {_ranks(r.ranks_present)} of {world} (missing "
                   f"{_ranks(r.ranks_missing)}): figures of the ranks present only")
    if r.pipeline_found and r.step_evidence:
        out.append(f"steps from {r.step_evidence}")
    if r.actions_inferred:
        cov = (f"; {pct(r.inference_coverage)} of the schedule threads' compute lies in an action "
               "or a step's start-up or wrap-up") \
            if r.inference_coverage is not None else ""
        out.append("actions inferred from the ops (no per-action annotations): B from the "
                   "autograd engine's ops, F from the forward's op sequence (repeated exactly, "
                   "or the family of like blocks with one per backward), split at send/recv; "
                   f"microbatches numbered by order{cov}")
    if r.uncertain:
        out.append(uncertain_text(r) or "")
    return out


def bubble_title(r: AuditResult) -> str:
    """The title of the bubble table: what the measured figure covers."""
    if r.uncertain and layout_only([u["reason"] for u in r.uncertain]):
        return "Pipeline bubble (UNCERTAIN: which ranks form a pipeline is a guess)"
    if r.uncertain:
        return "Pipeline bubble (UNCERTAIN: the reading does not settle what ran)"
    if r.bubble.scope == "own window":
        return ("Bubble in each rank's own window (ranks of the pipeline missing: per-rank "
                "figures, not the pipeline bubble)")
    if len(r.pipelines) > 1:
        return "Pipeline bubble (fraction of the step, mean over the ranks of every replica and steps)"
    return "Pipeline bubble (fraction of the step, mean over ranks and steps)"


PIPELINE_COLUMNS = ("pipeline", "ranks", "bubble", "replay ideal", "median step ms",
                    "slowest stage", "its compute ms")


def pipeline_rows(r: AuditResult) -> list[list[str]]:
    """One row per pipeline replica (shown when there are several)."""
    return [[str(p.pipeline), ranks_text(p.ranks), pct(p.bubble), pct(p.replay_ideal),
             ms(p.step_time_us), "-" if p.slowest_stage is None else str(p.slowest_stage),
             ms(p.slowest_stage_compute_us)] for p in r.pipelines]


def job_lines(r: AuditResult) -> list[str]:
    """The job across its replicas, in words."""
    job = r.job
    if not job:
        return []
    out = []
    if job.get("slowest_pipeline") is not None:
        spread = job.get("spread")
        out.append(f"job step {ms(job.get('step_time_us'))} ms: as long as its slowest replica, "
                   f"pipeline {job['slowest_pipeline']} (its slowest stage: {job.get('slowest_stage')}); "
                   f"spread between replicas {pct(spread)}")
    b = job.get("breakdown")
    if b:
        wait = b.get("dp_wait_us")
        out.append(f"per rank and step: compute {ms(b['compute_us'])} ms, pipeline bubble "
                   f"{ms(b['bubble_us'])} ms, exposed P2P transfer {ms(b['exposed_p2p_us'])} ms, "
                   f"exposed data-parallel sync {ms(b['exposed_dp_us'])} ms (of "
                   f"{ms(b['dp_comm_us'])} ms"
                   + (f", {ms(wait)} ms waiting for the slowest replica" if wait is not None else "")
                   + f"); span {ms(b['span_us'])} ms")
    return out


def ranks_text(ranks: list[int]) -> str:
    """``0-3, 6`` style."""
    if not ranks:
        return "-"
    ranks = sorted(ranks)
    parts, start, prev = [], ranks[0], ranks[0]
    for x in ranks[1:] + [None]:  # type: ignore[list-item]
        if x is not None and x == prev + 1:
            prev = x
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if x is not None:
            start = prev = x
    return ", ".join(parts)
