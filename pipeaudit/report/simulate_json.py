"""JSON reporter of ``simulate``: one simulation, a comparison, a sweep over M, a building block.

The documents carry ``schema_version`` and are indented by one space (the format
``pipeaudit simulate --format json`` has always printed)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pipeaudit import SCHEMA_VERSION
from pipeaudit.schedules.simulation import Simulation, SweepRow, simulation_to_dict, sweep_row_to_dict


def _dump(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=1) + "\n"


def render_simulation_json(sim: Simulation, *, info: dict | None = None) -> str:
    """One simulated schedule (with its building block's summary when it was built from one)."""
    doc = simulation_to_dict(sim)
    if info is not None:
        doc = {**doc, "building_block": info}
    return _dump(doc)


def render_compare_json(items: Sequence[Simulation | tuple[str, str]]) -> str:
    """Several schedules side by side; a schedule that cannot run is ``{schedule, skipped}``."""
    return _dump({"schema_version": SCHEMA_VERSION, "compare": [
        simulation_to_dict(i, include_actions=False) if not isinstance(i, tuple)
        else {"schedule": i[0], "skipped": i[1]} for i in items]})


def render_sweep_json(rows: Sequence[SweepRow], *, num_ranks: int) -> str:
    """The bubble of schedules over a range of M."""
    return _dump({"schema_version": SCHEMA_VERSION, "P": num_ranks,
                  "sweep": [sweep_row_to_dict(r) for r in rows]})
