"""Build a :class:`Timeline` from trace files.

Each rank is decoded and reduced to its :class:`RankTimeline` in one task
(:func:`reduce_trace`), where the executor says (in-process, a local process pool, a Dask
cluster: see :mod:`pipeaudit.trace.executor`); only the small reduced timelines travel
back, so memory is bounded by the ranks being worked on, not by the whole run. The decode
builds only the event columns the reduction reads (:data:`REDUCE_COLUMNS`).
"""

from __future__ import annotations

from collections import Counter
from functools import partial
from typing import Any, Sequence

import polars as pl

from pipeaudit.options import LoadOptions
from pipeaudit.timeline import REDUCE_COLUMNS
from pipeaudit.timeline.layout import Layout, detect_layout
from pipeaudit.timeline.model import Timeline
from pipeaudit.timeline.p2p import ClockCorrection, settle_transfers
from pipeaudit.timeline.peers import pipelines_from_peers
from pipeaudit.timeline.rank import RankTimeline, reduce_rank
from pipeaudit.timeline.single_process import single_process, split_by_device
from pipeaudit.timeline.stepping import settle_steps
from pipeaudit.timeline.conservation import settle_accounts
from pipeaudit.timeline.invariants import (reading_doubts, sending_past_the_end,
                                          sends_from_position)
from pipeaudit.timeline.split_backward import choose_split_readings, fit_split_backward
from pipeaudit.timeline.virtual import split_virtual_stages


def stage_hints(manifest: dict[str, Any] | None) -> dict[int, int]:
    """Rank -> its only stage, from a harness manifest's ``stage_to_rank`` (ranks holding one stage)."""
    if not manifest or not isinstance(manifest.get("stage_to_rank"), list):
        return {}
    by_rank: dict[int, list[int]] = {}
    for stage, rank in enumerate(manifest["stage_to_rank"]):
        if not isinstance(rank, int) or isinstance(rank, bool):
            return {}  # not a harness manifest we understand: no hints
        by_rank.setdefault(rank, []).append(stage)
    return {r: s[0] for r, s in by_rank.items() if len(s) == 1}


def reduce_trace(trace, *, hints: dict[int, int], pattern: str | None) -> RankTimeline:
    """The per-rank task: a decoded trace -> its reduced timeline (runs in a worker)."""
    return reduce_rank(trace, stage_hint=hints.get(trace.rank), pattern=pattern)


def build_timeline(paths: Sequence[str], options: LoadOptions | None = None) -> Timeline:
    """Decode, validate and reduce every rank's trace into one timeline.

    ``options``: :class:`~pipeaudit.options.LoadOptions` (validated when made). ``salvage``
    needs all ranks' events at once (the steps the damage cut are excluded on every rank),
    so that path decodes the whole run before reducing it: a recovery path, not a fast one.
    Partial traces of a failed harness run (header ``pipeaudit_incomplete_step``) take the
    same path.
    """
    from pipeaudit.trace.load import load_traces, map_ranks
    from pipeaudit.trace.cut import PARTIAL_KEY

    o = options or LoadOptions()
    pattern, jobs, allow_missing, executor = o.action_pattern, o.jobs, o.allow_missing, o.executor
    max_memory, salvage = o.max_memory, o.salvage
    salvaged: list[Any] = []
    full_decode = salvage
    if not salvage:
        res = map_ranks(
            list(paths), jobs=jobs, allow_missing=allow_missing, executor=executor,
            columns=REDUCE_COLUMNS, max_memory=max_memory,
            job_for_rank=lambda manifest: partial(reduce_trace, hints=stage_hints(manifest),
                                                  pattern=pattern),
        )
        # partial traces of a failed harness run: the cut steps must be aligned across ranks
        full_decode = any(i.header.get(PARTIAL_KEY) is not None for i in res.infos)
        if not full_decode:
            values, manifest, set_warnings = res.values, res.manifest, res.warnings
            inputs, headers = [str(i.path) for i in res.infos], [i.header for i in res.infos]
    if full_decode:
        ts = load_traces(list(paths), jobs=jobs, allow_missing=allow_missing, executor=executor,
                         max_memory=max_memory, salvage=salvage)
        hints = stage_hints(ts.manifest)
        values = [reduce_trace(t, hints=hints, pattern=pattern) for t in ts.ranks]
        manifest, inputs, set_warnings = ts.manifest, [str(t.path) for t in ts.ranks], ts.warnings
        headers = [t.header for t in ts.ranks]
        salvaged = ts.salvaged
    repeats_undecided: set[int] = set()
    values = consistent_counts(values, o.num_microbatches, repeats_undecided)
    world = next((rt.world_size for rt in values if rt.world_size is not None), None)
    process_note, shared_device = None, None
    if single_process(values, world):
        values, process_note, shared_device = split_by_device(values[0])
        n = len(values)
        lay = Layout(n, 1, 1, (tuple((r,) for r in range(n)),), "one process: a rank per device or "
                     "stage", n)
    else:
        lay = detect_layout(
            headers=headers, ranks=[rt.rank for rt in values], world_size=world, manifest=manifest,
            rank_stages={rt.rank: frozenset(int(s) for s in rt.actions["stage"].unique().to_list())
                         for rt in values if not rt.stage_from_rank and rt.actions.height},
            spec=o.layout, peers=lambda groups: pipelines_from_peers(values, groups),
        )
    for rt in values:
        rt.send_op_starts = None  # read by the layout's who-sends-to-whom only
    positions = {}
    for rt in values:
        where = lay.position(rt.rank)
        if where is not None:
            positions[rt.rank] = where[1]
    values, sends = choose_split_readings(values, positions, lay.pp)
    sent = {rt.rank: int((rt.p2p_tags["dir"] == "send").sum())  # read before they are settled
            for rt in values if rt.p2p_tags.height and not rt.p2p_tags["dir"].null_count()}
    for rt in values:
        where = lay.position(rt.rank)
        if where is None:
            continue
        if rt.stage_from_rank and rt.actions.height:
            rt.actions = rt.actions.with_columns(stage=pl.lit(where[1], dtype=pl.Int64))
    grads_back = sends_from_position(values, positions, 0, "B")
    fed_first = sending_past_the_end(values, grads_back, ("B", "I"))
    sent_on = sends_from_position(values, positions, lay.pp - 1, "F") if lay.pp > 1 else {}
    feeding_last = sending_past_the_end(values, sent_on, ("F",))
    # does the first or last position show a rank holding several stages? None: neither is read
    ends_read = {0, lay.pp - 1} & {positions.get(rt.rank) for rt in values if rt.actions.height}
    looped = True if fed_first or feeding_last else (False if ends_read else None)
    clock = settle_transfers(values, lay, positions)
    decision = settle_steps(values, positions=positions, num_stages=lay.pp,
                            stated_microbatches=o.num_microbatches, stated_steps=o.num_steps,
                            manifest_microbatches=_manifest_microbatches(manifest))
    split_note, split_ambiguous = fit_split_backward(values, positions, lay.pp, sends=sends,
                                                     stated=o.schedule)
    virtual_note, chunks_ambiguous = split_virtual_stages(values, positions, lay.pp, looped=looped,
                                        stated=o.schedule, stated_microbatches=o.num_microbatches,
                                        grads_back=grads_back)
    virtual_note, chunks_ambiguous = virtual_note or split_note, chunks_ambiguous or split_ambiguous
    settle_accounts(values)
    doubts = reading_doubts(values, positions, replicas=lay.replicas, fed_first=fed_first,
                            feeding_last=feeding_last,
                            chunks_ambiguous=chunks_ambiguous, repeats_undecided=repeats_undecided,
                            stated=(o.num_microbatches,
                                    o.num_steps if decision.from_stated else None),
                            steps_undecided=decision.undecided, layout_guessed=lay.guessed,
                            sent=sent, num_positions=lay.pp)
    warnings = list(set_warnings)
    for rt in values:
        warnings.extend(w for w in rt.warnings if w not in warnings)
    if process_note:
        warnings.append(process_note)
    warnings.extend(lay.notes)
    warnings.extend(decision.notes)
    if virtual_note:
        warnings.append(virtual_note)
    warnings.extend(clock_notes(clock))
    return Timeline(ranks=list(values), manifest=manifest, inputs=inputs, warnings=warnings,
                    salvage=salvaged, layout=lay, step_evidence=decision.evidence, clock=clock,
                    shared_device=shared_device, doubts=doubts)


def consistent_counts(values: list[RankTimeline], stated_microbatches: int | None = None,
                      undecided: set[int] | None = None) -> list[RankTimeline]:
    """Each inferred rank with two readings (:attr:`RankTimeline.alternative`) keeps the one
    whose forwards agree in number with the other ranks': every rank of a pipeline runs as
    many forwards as its neighbours hand it activations, so a rank whose block of repeated
    layers was read as several forwards stands out. Where no other rank says (one rank's
    file), the one whose forwards per step are the M the user stated; where nothing says, the
    rank is added to ``undecided`` (its reading is uncertain)."""
    def forwards(rt: RankTimeline) -> int:
        return int((rt.actions["kind"] == "F").sum())

    def per_step(rt: RankTimeline) -> float | None:
        steps = rt.actions.filter(pl.col("step") >= 0)["step"].n_unique()
        return forwards(rt) / steps if steps else None

    counts = Counter(forwards(rt) for rt in values if rt.actions.height and rt.alternative is None)
    out = []
    for rt in values:
        alt, rt.alternative = rt.alternative, None
        if alt is not None and counts and forwards(rt) not in counts and forwards(alt) in counts:
            rt = alt
        elif alt is not None and not counts:
            if stated_microbatches is None or stated_microbatches not in (per_step(rt), per_step(alt)):
                if undecided is not None and forwards(rt) != forwards(alt):
                    undecided.add(rt.rank)
            elif per_step(rt) != stated_microbatches:
                rt = alt
        out.append(rt)
    return out


def clock_notes(clock: ClockCorrection) -> list[str]:
    """One note per host whose clock was moved."""
    out = []
    for host, ns in sorted(clock.offsets_ns.items()):
        if not ns:
            continue
        half = clock.uncertainty_ns.get(host, -1)
        within = f" (within +/-{half / 1000:.1f} us)" if half >= 0 else " (transfers one way only: the least correction)"
        out.append(f"clock of host {host} moved {-ns / 1000:+.1f} us onto host {clock.reference}'s"
                   f"{within}, from {clock.pairs} send/recv pairs across hosts")
    return out


def _manifest_microbatches(manifest: dict[str, Any] | None) -> int | None:
    m = (manifest or {}).get("num_microbatches")
    return m if isinstance(m, int) and not isinstance(m, bool) and m >= 1 else None
