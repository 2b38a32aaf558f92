"""Schedule catalogue, replay simulator and closed-form theory.

Imports neither torch nor click. Main entry points::

    build_schedule("1f1b", num_ranks=4, num_microbatches=8)
    replay(schedule.orders, schedule.placement, uniform_durations(1, 2))
    theory("1f1b", 4, 8)
    detect_schedule(orders_by_rank, placement, num_microbatches)
    build_from_block(named_block("1f1b-v", 4), num_microbatches=8)
"""

from __future__ import annotations

from pipeaudit.schedules.block_files import format_block_json, load_block_file
from pipeaudit.schedules.block_library import NAMED_BLOCKS, named_block
from pipeaudit.schedules.blocks import BuildingBlock, Pass, build_from_block, collisions
from pipeaudit.schedules.catalogue import (
    CATALOGUE,
    DESCRIPTIONS,
    SCHEDULE_NAMES,
    TORCH_CLASSES,
    ScheduleDef,
    build_schedule,
    canonical_name,
    default_chunks,
    get_def,
)
from pipeaudit.schedules.detect import (
    compare_names_to_catalogue,
    detect_schedule,
    order_differences,
)
from pipeaudit.schedules.files import (
    format_schedule_csv,
    format_schedule_json,
    load_schedule_file,
    save_schedule_file,
)
from pipeaudit.schedules.model import Schedule, loop_placement, v_placement
from pipeaudit.schedules.replay import (
    ReplayedAction,
    ReplayResult,
    peak_inflight_of_orders,
    replay,
    uniform_durations,
)
from pipeaudit.schedules.published import Published
from pipeaudit.schedules.theory import Theory, theory
from pipeaudit.schedules.torchnames import actions_from_names, orders_from_names, parse_action_name

__all__ = [
    "BuildingBlock",
    "CATALOGUE",
    "NAMED_BLOCKS",
    "Pass",
    "DESCRIPTIONS",
    "SCHEDULE_NAMES",
    "TORCH_CLASSES",
    "Published",
    "ReplayResult",
    "ReplayedAction",
    "Schedule",
    "ScheduleDef",
    "Theory",
    "actions_from_names",
    "build_from_block",
    "build_schedule",
    "canonical_name",
    "collisions",
    "compare_names_to_catalogue",
    "default_chunks",
    "detect_schedule",
    "format_block_json",
    "format_schedule_csv",
    "format_schedule_json",
    "get_def",
    "load_block_file",
    "load_schedule_file",
    "loop_placement",
    "named_block",
    "order_differences",
    "orders_from_names",
    "parse_action_name",
    "peak_inflight_of_orders",
    "replay",
    "save_schedule_file",
    "theory",
    "uniform_durations",
    "v_placement",
]
