"""Options shared by commands that load a run from traces (baseline, gate, diff)."""

from __future__ import annotations

from typing import Any, Callable

import click


def run_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Add --schedule, --action-pattern, --microbatches and --jobs (as for ``analyze``)."""
    opts = [
        click.option("--schedule", default=None,
                     help="Declare the schedule that ran (checked against the order)."),
        click.option("--action-pattern", default=None, metavar="REGEX",
                     help="Regex with named groups kind, mb and optionally stage."),
        click.option("--microbatches", type=int, default=None,
                     help="Microbatches per step (un-annotated traces without ProfilerStep spans)."),
        click.option("--jobs", type=int, default=None, help="Ranks decoded in parallel."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def load_kwargs(schedule, action_pattern, microbatches, jobs) -> dict[str, Any]:
    """Keyword arguments of :func:`pipeaudit.gate.load_snapshot` from the shared options."""
    return {"schedule": schedule, "action_pattern": action_pattern,
            "num_microbatches": microbatches, "jobs": jobs}
