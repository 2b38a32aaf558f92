"""Options shared by the picture commands (`export`, `plot`): which traces and how to read them."""

from __future__ import annotations

from collections.abc import Callable

import click


def run_options(f: Callable) -> Callable:
    """PATHS plus the trace-reading options of `pipeaudit analyze`."""
    f = click.option("--jobs", type=int, default=None,
                     help="Ranks decoded in parallel (default: cores).")(f)
    f = click.option("--microbatches", type=int, default=None,
                     help="Microbatches per step (for un-annotated traces without ProfilerStep spans).")(f)
    f = click.option("--action-pattern", default=None, metavar="REGEX",
                     help="Regex with named groups kind, mb and optionally stage, for other frameworks' spans.")(f)
    f = click.argument("paths", nargs=-1, required=True)(f)
    return f


def load_run(paths, action_pattern, microbatches, jobs):
    """``pipeaudit.load`` with the CLI's options."""
    import pipeaudit

    return pipeaudit.load(paths, action_pattern=action_pattern, num_microbatches=microbatches,
                          jobs=jobs)
