"""Build a :class:`Timeline` from trace files."""

from __future__ import annotations

from typing import Any, Sequence

import polars as pl

from pipeaudit.timeline.model import Timeline
from pipeaudit.timeline.rank import RankTimeline, reduce_rank


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


def build_timeline(
    paths: Sequence[str],
    *,
    pattern: str | None = None,
    num_microbatches: int | None = None,
    jobs: int | None = None,
    allow_missing: bool = False,
) -> Timeline:
    """Decode, validate and reduce every rank's trace into one timeline."""
    from pipeaudit.trace import load_traces

    ts = load_traces(list(paths), jobs=jobs, allow_missing=allow_missing)
    hints = stage_hints(ts.manifest)
    m = num_microbatches or (ts.manifest or {}).get("num_microbatches")
    ranks = []
    for t in ts.ranks:
        rt = reduce_rank(t, stage_hint=hints.get(t.rank), pattern=pattern)
        ranks.append(renumber_inferred(rt, m))
    warnings = list(ts.warnings)
    for rt in ranks:
        warnings.extend(w for w in rt.warnings if w not in warnings)
    return Timeline(ranks=ranks, manifest=ts.manifest, inputs=[str(t.path) for t in ts.ranks],
                    warnings=warnings)
