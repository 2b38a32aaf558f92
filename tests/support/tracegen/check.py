"""Read a generated case with pipeaudit.load and hold the reading to the truth.

The bounds (issue 50): per-rank bubble within 0.005 of the truth; schedule (any name that runs
the same order at this P, v, M), v, M and steps exact; no ERROR finding of the reading kinds.
A reading that says it cannot tell (a ``READING_UNCERTAIN`` finding) is held only to: no
reading-kind ERROR, and any schedule or M it still claims is right."""

from __future__ import annotations

import signal
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.tracegen import Case, Generated, generate

BUBBLE_TOLERANCE = 0.005
READING_ERRORS = ("MISSING_ACTIONS", "DUPLICATED_ACTIONS", "SCHEDULE_ORDER_VIOLATION",
                  "NO_ACTIONS_FOUND")
UNCERTAIN = "READING_UNCERTAIN"
#: a reading that takes longer than this (seconds) fails the case (0: no limit)
READ_LIMIT_S = 60


class ReadTooSlow(Exception):
    """The reader did not finish within the limit."""


@contextmanager
def _limit(seconds: int):
    """Raise ReadTooSlow after ``seconds`` (SIGALRM: the main thread of a Unix process)."""
    if not seconds or not hasattr(signal, "SIGALRM"):
        yield
        return

    def _raise(signum, frame):
        raise ReadTooSlow(f"the reading took over {seconds} s")

    old = signal.signal(signal.SIGALRM, _raise)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@dataclass
class Outcome:
    """How one case read: "pass", "cannot tell" or "fail", with what was wrong."""

    case: Case
    verdict: str
    problems: list[str] = field(default_factory=list)
    worst_bubble_error: float = 0.0
    uncertain_reason: str = ""
    #: the lowest coverage of a rank read from its ops (compute conservation; None: none is)
    lowest_coverage: float | None = None


def read_case(g: Generated, folder: Path):
    """Write the case's traces into ``folder`` and read them (what the user stated, only)."""
    import pipeaudit

    g.write(folder)
    c = g.case
    run = pipeaudit.load(str(folder), jobs=1,
                         num_steps=c.steps if c.state_steps else None,
                         num_microbatches=c.m if c.state_microbatches else None,
                         allow_missing=c.one_rank is not None)
    return run.audit()


def judge(g: Generated, audit) -> Outcome:
    """Hold one reading to the truth."""
    tr = g.truth
    problems: list[str] = []
    uncertain = [f for f in audit.findings if f.code == UNCERTAIN]
    for f in audit.findings:
        if f.severity == "error" and f.code in READING_ERRORS:
            problems.append(f"{f.code} (rank {f.rank}): {f.message[:160]}")
    worst = 0.0
    if uncertain:
        if audit.schedule is not None and audit.schedule not in tr.accepted_schedules:
            problems.append(f"schedule read as {audit.schedule} (truth {sorted(tr.accepted_schedules)})"
                            " while uncertain")
        if audit.num_microbatches and audit.num_microbatches != tr.m:
            problems.append(f"M read as {audit.num_microbatches} (truth {tr.m}) while uncertain")
        verdict = "fail" if problems else "cannot tell"
        return Outcome(g.case, verdict, problems, 0.0, uncertain[0].message[:200])
    if audit.schedule not in tr.accepted_schedules:
        problems.append(f"schedule read as {audit.schedule} (truth {sorted(tr.accepted_schedules)})")
    if audit.num_chunks != tr.v:
        problems.append(f"v read as {audit.num_chunks} (truth {tr.v})")
    if audit.num_microbatches != tr.m:
        problems.append(f"M read as {audit.num_microbatches} (truth {tr.m})")
    if audit.num_steps != tr.steps:
        problems.append(f"steps read as {audit.num_steps} (truth {tr.steps})")
    seen = set()
    for r in audit.ranks:
        if r.rank not in tr.rank_bubble:
            continue
        seen.add(r.rank)
        if r.bubble is None:
            problems.append(f"rank {r.rank}: no bubble (truth {tr.rank_bubble[r.rank]:.4f})")
            continue
        err = abs(r.bubble - tr.rank_bubble[r.rank])
        worst = max(worst, err)
        if err > BUBBLE_TOLERANCE:
            problems.append(f"rank {r.rank}: bubble {r.bubble:.4f}, truth {tr.rank_bubble[r.rank]:.4f}"
                            f" (off by {r.bubble - tr.rank_bubble[r.rank]:+.4f})")
    present = {g.case.one_rank} if g.case.one_rank is not None else set(tr.rank_bubble)
    for rank in sorted(present - seen):
        problems.append(f"rank {rank}: not in the reading")
    covered = [row["coverage"] for row in audit.conservation if row.get("coverage") is not None]
    return Outcome(g.case, "fail" if problems else "pass", problems, worst, "",
                   min(covered) if covered else None)


def run_case(case: Case, folder: Path | None = None, limit_s: int = READ_LIMIT_S) -> Outcome:
    """Generate, write, read and judge one case (in a temporary folder unless given one); a
    reading over ``limit_s`` seconds fails."""
    g = generate(case)
    with tempfile.TemporaryDirectory(prefix="tracegen-") as d:
        try:
            with _limit(limit_s):
                audit = read_case(g, Path(folder or d))
        except ReadTooSlow as e:
            return Outcome(case, "fail", [str(e)])
    return judge(g, audit)
