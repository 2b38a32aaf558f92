"""The action model shared by schedules, timelines and the audit.

An action is one unit of pipeline work on one stage: a forward (F), a full
backward (B), a backward for inputs only (I) or a backward for weights only (W),
for one microbatch. Stage numbers are global stage indices (0 .. S-1), not ranks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

FORWARD = "F"
BACKWARD = "B"
BACKWARD_INPUT = "I"
BACKWARD_WEIGHT = "W"
KINDS: tuple[str, ...] = (FORWARD, BACKWARD, BACKWARD_INPUT, BACKWARD_WEIGHT)

_ACTION_RE = re.compile(r"^(\d+)([FBIW])(\d+)$")


@dataclass(frozen=True, slots=True, order=True)
class Action:
    """One compute action: ``stage``, ``kind`` (F/B/I/W) and ``microbatch``."""

    stage: int
    kind: str
    microbatch: int

    def __str__(self) -> str:
        return f"{self.stage}{self.kind}{self.microbatch}"

    @classmethod
    def parse(cls, text: str) -> "Action":
        """Parse torch's compact form, e.g. ``"2F0"`` or ``"1I3"``."""
        m = _ACTION_RE.match(text.strip())
        if m is None:
            raise ValueError(f"not an action: {text!r} (expected e.g. 2F0, 1B3, 0W1)")
        return cls(int(m.group(1)), m.group(2), int(m.group(3)))

    @property
    def is_backward(self) -> bool:
        """True for B, I and W."""
        return self.kind != FORWARD

    @property
    def frees_activations(self) -> bool:
        """True for the action after which a microbatch stops being in flight (B or I)."""
        return self.kind in (BACKWARD, BACKWARD_INPUT)
