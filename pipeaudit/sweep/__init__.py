"""``pipeaudit sweep``: profile and audit a grid of schedules x P x M (x v).

    from pipeaudit.sweep import SweepConfig, run_sweep
    result = run_sweep(SweepConfig(out="sweeps/a", schedules=("gpipe", "1f1b"),
                                   stages=(2,), microbatches=(2, 4, 8)))
    [(r.key, r.status, r.measured_bubble, r.theory_bubble) for r in result.records]

Modules: ``grid`` (expansion + harness validation), ``runner`` (profile, audit,
save as it goes, resume), ``results`` (records, sweep.json / sweep.csv), ``table``
(text reporter), ``plots`` (matplotlib PNGs), ``progress`` (stderr progress).
Importing this package does not import torch or matplotlib.
"""

from __future__ import annotations

from pipeaudit.sweep.grid import GridEntry, GridPoint, expand_grid
from pipeaudit.sweep.results import SweepRecord, SweepResult, load, save
from pipeaudit.sweep.runner import SweepConfig, run_sweep

__all__ = [
    "GridEntry",
    "GridPoint",
    "SweepConfig",
    "SweepRecord",
    "SweepResult",
    "expand_grid",
    "load",
    "run_sweep",
    "save",
]
