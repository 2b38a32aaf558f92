"""Why is the step this long, and what would fix it.

    from pipeaudit.explain import critical_path, explain, whatif, Changes
    run = pipeaudit.load("sample_traces/1f1b_p4_m8_imb_s1x3")
    cp = critical_path(run.timeline, step=0)     # CriticalPath: items, shares, slack
    ex = explain(run.timeline)                   # Explanation: every step + top_causes
    p = whatif(run.timeline, Changes(scale=((1, None, 1 / 3),)))   # Prediction

See docs/explain.md for the model and its assumptions.
"""

from __future__ import annotations

from pipeaudit.explain.causes import Cause
from pipeaudit.explain.critical import CriticalPath, PathItem, Slack
from pipeaudit.explain.explain import Explanation, critical_path, explain
from pipeaudit.explain.whatif import Changes, Prediction, parse_scale, whatif

__all__ = [
    "Cause", "Changes", "CriticalPath", "Explanation", "PathItem", "Prediction", "Slack",
    "critical_path", "explain", "parse_scale", "whatif",
]
