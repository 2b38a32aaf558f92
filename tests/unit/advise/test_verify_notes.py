"""What ``advise --verify`` tells the user about its own reruns."""

from __future__ import annotations

from pipeaudit.advise.advise import TYPICAL_ERROR
from pipeaudit.advise.verify import unsteady_note


def test_an_unsteady_machine_is_told_to_repeat():
    assert unsteady_note(1.0 + TYPICAL_ERROR / 2, 1) is None
    assert unsteady_note(1.0 - TYPICAL_ERROR / 2, 1) is None
    slow = unsteady_note(1.12, 1)
    assert slow is not None and "1.12x" in slow and "--repeat 3" in slow
    assert unsteady_note(0.85, 1) is not None
    assert unsteady_note(1.5, 3) is None  # repeated already: the median stands for each
