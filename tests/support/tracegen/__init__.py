"""A generator of pipeline traces with known truth (issue 50).

    from tests.support.tracegen import Case, generate
    g = generate(Case("zbv", pp=2, v=2, m=4))
    g.write(folder)          # rank*.json, Kineto JSON as torch.profiler writes it
    g.truth.rank_bubble      # {rank: bubble}, by docs/metrics.md's definitions

Written from docs/metrics.md, torch's schedule definitions and what real traces look like,
never from the reader (no pipeaudit import): orders.py (per-rank programs), shapes.py (op
sequences), timing.py (dependency-driven execution), emit.py (Kineto JSON), truth.py (truth),
strategies.py (hypothesis strategies drawing every dimension independently).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tests.support.tracegen.case import Case
from tests.support.tracegen.emit import write
from tests.support.tracegen.timing import RankRun, simulate
from tests.support.tracegen.truth import Truth, truth


@dataclass
class Generated:
    """A generated run: its case, its ranks' events and its truth."""

    case: Case
    runs: list[RankRun]
    truth: Truth

    def write(self, folder: str | Path) -> list[Path]:
        """Write the traces into ``folder``; returns the files written."""
        return write(self.case, self.runs, folder)


def generate(case: Case) -> Generated:
    """Simulate the case and compute its truth."""
    runs = simulate(case)
    return Generated(case, runs, truth(case, runs))


__all__ = ["Case", "Generated", "Truth", "generate"]
