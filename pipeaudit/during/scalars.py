"""The numbers logged for each window, named as they appear in TensorBoard, W&B and MLflow.

All come from the window's audit (what ``pipeaudit analyze --format json`` reports):
``bubble`` (measured), ``theory``, ``replay_ideal`` (fractions of the step) and
``step_time_ms`` (median over the window's steps); from its per-step series (``per_step``,
what ``gate`` holds to a baseline), each the median over the window's steps:
``exposed_comm`` (fraction of the step), ``stage_imbalance`` (max/median stage compute) and
``stage{s}/compute_ms`` (compute per step of stage s). A value the run cannot give (no theory
for an unknown schedule) is left out.
"""

from __future__ import annotations

from statistics import median

PREFIX = "pipeaudit/"


def scalars_of(audit: dict) -> dict[str, float]:
    """The window's scalars from its analyze document (a plain dict)."""
    series = audit.get("per_step")
    out: dict[str, float] = {}
    bubble = audit.get("bubble") or {}
    for name, key in (("bubble", "measured"), ("theory", "theory"),
                      ("replay_ideal", "replay_ideal")):
        if bubble.get(key) is not None:
            out[name] = float(bubble[key])
    times = [s["step_time_us"] for s in audit.get("steps") or []]
    if times:
        out["step_time_ms"] = float(median(times)) / 1000.0
    if series and series.get("steps"):
        out["exposed_comm"] = float(median(series["exposed_comm"]))
        out["stage_imbalance"] = float(median(series["imbalance"]))
        for stage, by_kind in sorted(series["stage_compute_us"].items(), key=lambda x: int(x[0])):
            per_step = [sum(v) for v in zip(*by_kind.values())]
            if per_step:
                out[f"stage{int(stage)}/compute_ms"] = float(median(per_step)) / 1000.0
    return out


def tagged(scalars: dict[str, float]) -> dict[str, float]:
    """``{"pipeaudit/bubble": ...}``: the names under which every backend logs them."""
    return {PREFIX + k: v for k, v in scalars.items()}
