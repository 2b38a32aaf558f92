"""Data dependencies between pipeline actions (the edges of the cross-rank graph).

F(s, m) needs F(s-1, m); B/I(s, m) needs B/I(s+1, m) (the last stage: its own
F(s, m)); W(s, m) needs I(s, m). Every backward also follows its own forward.
"""

from __future__ import annotations

from pipeaudit.actions import Action


def producers(a: Action, num_stages: int) -> list[Action]:
    """Actions whose output ``a`` consumes (candidates: a split or a full backward upstream)."""
    s, m = a.stage, a.microbatch
    if a.kind == "F":
        return [Action(s - 1, "F", m)] if s > 0 else []
    if a.kind == "W":
        return [Action(s, "I", m)]
    deps = [Action(s, "F", m)]
    if s < num_stages - 1:
        deps += [Action(s + 1, "B", m), Action(s + 1, "I", m)]
    return deps
