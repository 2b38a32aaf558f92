"""Where one rank's schedule-thread compute went: the record that compute conservation
(:mod:`pipeaudit.timeline.conservation`) settles once steps are known."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class OpAccount:
    """Where one rank's schedule-thread compute went (ns)."""

    compute_ns: int  #: the thread's compute (optimizer, FSDP hooks and P2P preparation excluded)
    in_actions_ns: int
    loose_starts: np.ndarray  #: compute ops in no action, by start
    loose_ends: np.ndarray
    loose_scaling: np.ndarray  #: ... which of them scale gradients in place
    #: ... each one's name (a code within the rank); None: unknown
    loose_names: np.ndarray | None = None
    start_up_ns: int = 0
    grad_scaling_ns: int = 0
    wrap_up_ns: int = 0
    unexplained_ns: int = 0
    #: ... each op of it at the least time its name takes in no action on the rank (what the
    #: coverage counts: one descheduled bookkeeping op is no missed work)
    missed_ns: int = 0

    @property
    def coverage(self) -> float | None:
        """Share of the compute in an action or a named category."""
        if not self.compute_ns:
            return None
        return 1.0 - self.missed_ns / self.compute_ns

    def to_dict(self, rank: int) -> dict[str, float | int]:
        us = 1000.0
        return {"rank": rank, "compute_us": self.compute_ns / us,
                "in_actions_us": self.in_actions_ns / us, "start_up_us": self.start_up_ns / us,
                "grad_scaling_us": self.grad_scaling_ns / us,
                "wrap_up_us": self.wrap_up_ns / us, "unexplained_us": self.unexplained_ns / us,
                "coverage": self.coverage}
