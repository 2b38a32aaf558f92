"""Build a :class:`Timeline` from trace files.

Each rank is decoded and reduced to its :class:`RankTimeline` in one task
(:func:`reduce_trace`), where the executor says (in-process, a local process pool, a Dask
cluster: see :mod:`pipeaudit.trace.executor`); only the small reduced timelines travel
back, so memory is bounded by the ranks being worked on, not by the whole run. The decode
builds only the event columns the reduction reads (:data:`REDUCE_COLUMNS`).
"""

from __future__ import annotations

from functools import partial
from typing import Any, Sequence

import polars as pl

from pipeaudit.timeline.model import Timeline
from pipeaudit.timeline.rank import RankTimeline, reduce_rank

#: Event columns :func:`reduce_rank` reads besides name, cat, ph, ts and dur.
REDUCE_COLUMNS = ("tid", "correlation")


def stage_hints(manifest: dict[str, Any] | None) -> dict[int, int]:
    """Rank -> its only stage, from a harness manifest's ``stage_to_rank`` (ranks holding one stage)."""
    if not manifest or not isinstance(manifest.get("stage_to_rank"), list):
        return {}
    by_rank: dict[int, list[int]] = {}
    for stage, rank in enumerate(manifest["stage_to_rank"]):
        by_rank.setdefault(int(rank), []).append(stage)
    return {r: s[0] for r, s in by_rank.items() if len(s) == 1}


def renumber_inferred(rt: RankTimeline, num_microbatches: int | None) -> RankTimeline:
    """Without ProfilerStep spans, inferred microbatch k is microbatch k % M of step k // M."""
    if rt.source != "inferred" or not num_microbatches or rt.steps.height:
        return rt
    rt.actions = rt.actions.with_columns(
        step=pl.col("microbatch") // num_microbatches,
        microbatch=pl.col("microbatch") % num_microbatches,
    )
    return rt


def reduce_trace(trace, *, hints: dict[int, int], pattern: str | None) -> RankTimeline:
    """The per-rank task: a decoded trace -> its reduced timeline (runs in a worker)."""
    return reduce_rank(trace, stage_hint=hints.get(trace.rank), pattern=pattern)


def build_timeline(
    paths: Sequence[str],
    *,
    pattern: str | None = None,
    num_microbatches: int | None = None,
    jobs: int | None = None,
    allow_missing: bool = False,
    executor: str | None = None,
    max_memory: int | str | None = None,
) -> Timeline:
    """Decode, validate and reduce every rank's trace into one timeline.

    ``jobs``: ranks worked on at once on this machine (default: the cores);
    ``executor``: ``local`` (default), ``processes`` or ``dask://host:port``;
    ``max_memory``: memory budget in bytes or text (``"4G"``) for the decode, default half
    of the available memory (files too big for a worker's share are streamed).
    """
    from pipeaudit.trace.load import map_ranks

    res = map_ranks(
        list(paths), jobs=jobs, allow_missing=allow_missing, executor=executor,
        columns=REDUCE_COLUMNS, max_memory=max_memory,
        job_for_rank=lambda manifest: partial(reduce_trace, hints=stage_hints(manifest),
                                              pattern=pattern),
    )
    m = num_microbatches or (res.manifest or {}).get("num_microbatches")
    ranks = [renumber_inferred(rt, m) for rt in res.values]
    warnings = list(res.warnings)
    for rt in ranks:
        warnings.extend(w for w in rt.warnings if w not in warnings)
    return Timeline(ranks=ranks, manifest=res.manifest, inputs=[str(i.path) for i in res.infos],
                    warnings=warnings)
