"""pipeaudit.harness: run real pipeline-parallel training under torch.profiler.

Torch-free at import: ``ProfileConfig`` and its validation, the schedule
catalogue and the launcher import without torch; only the worker processes
(``pipeaudit.harness.worker`` and the modules it uses) import torch.

    from pipeaudit.harness import ProfileConfig, run_profile
    manifest = run_profile(ProfileConfig(out="runs/1f1b", schedule="1f1b",
                                         stages=4, microbatches=8))
"""

from __future__ import annotations

from pipeaudit.harness.catalog import SCHEDULE_NAMES, SCHEDULES, ScheduleSpec, stage_to_rank
from pipeaudit.harness.config import ModelConfig, ProfileConfig, parse_imbalance, parse_slow_ranks
from pipeaudit.harness.launcher import HarnessError, run_profile
from pipeaudit.harness.layout import MeshLayout
from pipeaudit.harness.manifest import MANIFEST_NAME, read_manifest

__all__ = [
    "HarnessError",
    "MANIFEST_NAME",
    "MeshLayout",
    "ModelConfig",
    "ProfileConfig",
    "SCHEDULES",
    "SCHEDULE_NAMES",
    "ScheduleSpec",
    "parse_imbalance",
    "parse_slow_ranks",
    "read_manifest",
    "run_profile",
    "stage_to_rank",
]
