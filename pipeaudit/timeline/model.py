"""The cross-rank timeline of a run: every rank's reduced timeline plus run facts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from pipeaudit.actions import Action
from pipeaudit.timeline.columns import ActionArrays, action_arrays
from pipeaudit.timeline.layout import Layout
from pipeaudit.timeline.rank import ACTION_COLUMNS, RankTimeline
from pipeaudit.timeline.recv_facts import RecvFacts, recv_facts


@dataclass
class Timeline:
    """All ranks of one run, on one clock."""

    ranks: list[RankTimeline]
    manifest: dict[str, Any] | None = None
    inputs: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    #: SalvageReports of damaged ranks read with ``salvage=True`` (empty otherwise)
    salvage: list[Any] = field(default_factory=list)
    #: the job's pipeline replicas (None: every rank given is one pipeline)
    layout: Layout | None = None
    #: what the steps were found from (see :mod:`pipeaudit.timeline.stepping`)
    step_evidence: str | None = None
    #: host clock offsets applied (a p2p.ClockCorrection), None when none was looked for
    clock: Any = None
    #: the one device every stage computed on, taking turns ("the CPU", "one GPU": a
    #: single-process run without a device per stage), None when each rank has its own
    shared_device: str | None = None
    #: why the actions read from the ops cannot be trusted (:mod:`pipeaudit.timeline.invariants`)
    doubts: list[Any] = field(default_factory=list)

    def replica(self, index: int) -> "Timeline":
        """The timeline of pipeline replica ``index`` alone: its ranks, and a layout of that
        one replica (so that its audit, critical path and what-if replay stand on their own)."""
        if self.layout is None or not 0 <= index < len(self.layout.replicas):
            count = len(self.layout.replicas) if self.layout is not None else 1
            raise IndexError(f"pipeline {index} does not exist (the job has {count})")
        lay = self.layout
        rep = lay.replicas[index]
        members = {r for peers in rep for r in peers}
        sub = Layout(lay.pp, 1, lay.tp, (rep,), f"{lay.source}, pipeline {index}", None, lay.notes)
        return Timeline(ranks=[rt for rt in self.ranks if rt.rank in members], manifest=self.manifest,
                        inputs=[i for rt, i in zip(self.ranks, self.inputs) if rt.rank in members]
                        if len(self.inputs) == len(self.ranks) else self.inputs,
                        warnings=self.warnings, salvage=self.salvage, layout=sub,
                        step_evidence=self.step_evidence, clock=self.clock,
                        shared_device=self.shared_device,
                        doubts=[d for d in self.doubts if d.rank in members])

    def subset(self, ranks: list[int], layout: Layout | None = None) -> "Timeline":
        """The timeline of some of this one's ranks (same run facts; ``layout`` if given):
        their action columns are taken from this timeline's where it has built them already
        (else the subset builds its own: building them for the whole job to cut them per
        replica would hold the job's at once)."""
        keep = set(ranks)
        index = [i for i, rt in enumerate(self.ranks) if rt.rank in keep]
        sub = Timeline(ranks=[self.ranks[i] for i in index], manifest=self.manifest,
                       inputs=self.inputs, warnings=self.warnings, salvage=self.salvage,
                       layout=self.layout if layout is None else layout,
                       step_evidence=self.step_evidence, clock=self.clock,
                       shared_device=self.shared_device,
                       doubts=[d for d in self.doubts if d.rank in keep])
        arrays = self._built("action_arrays")
        if arrays is not None:
            sub._prime("action_arrays", arrays.subset(index))
        return sub

    def recv_facts(self) -> dict[int, RecvFacts]:
        """Rank -> what the audit reads of its recvs (:mod:`pipeaudit.timeline.recv_facts`;
        each rank holds its own since the transfers were settled)."""
        return recv_facts(self.ranks)

    def forget_derived(self) -> None:
        """Drop the tables derived from the ranks' (action columns, per-step rows): built
        again if asked for."""
        self.__dict__.pop("_cache", None)

    def _prime(self, name: str, value) -> None:
        """Store ``value`` as what :meth:`_cached` would build for ``name`` now."""
        self.__dict__.setdefault("_cache", {})[name] = (self._cache_key(), value)

    @property
    def actions(self) -> pl.DataFrame:
        """Every action of every rank (``ACTION_COLUMNS``), sorted by rank then start."""
        return self._cached("actions", self._all_actions)

    def _all_actions(self) -> pl.DataFrame:
        frames = [r.actions for r in self.ranks if r.actions.height]
        if not frames:
            return pl.DataFrame(schema={c: r for c, r in zip(ACTION_COLUMNS, _ACTION_DTYPES)})
        return pl.concat(frames).sort(["rank", "start"])

    def _cache_key(self) -> tuple:
        """What the cached tables were built from: the ranks' action tables, as objects."""
        return (len(self.ranks), [id(r.actions) for r in self.ranks])

    def _built(self, name: str):
        """What :meth:`_cached` holds for ``name`` if it is current, else None."""
        hit = self.__dict__.get("_cache", {}).get(name)
        if hit is not None and hit[0] == self._cache_key():
            return hit[1]
        return None

    def _cached(self, name: str, build):
        """``build()``, kept while the ranks' action tables stay the same objects."""
        hit = self._built(name)
        if hit is not None:
            return hit
        value = build()
        self._prime(name, value)
        return value

    def step_rows(self, columns: tuple[str, ...]) -> list[dict[int, list[tuple]]]:
        """Per rank (in ``ranks`` order): step -> rows of ``columns`` of that step's actions
        in execution order (by compute start, then start)."""
        def build():
            out = []
            for r in self.ranks:
                a = r.actions.sort(["compute_start", "start"], maintain_order=True)
                steps = a["step"].to_list()
                by: dict[int, list[tuple]] = {}
                for k, row in zip(steps, a.select(*columns).iter_rows()):
                    by.setdefault(k, []).append(row)
                out.append(by)
            return out

        return self._cached(("step_rows", columns), build)

    @property
    def placement(self) -> dict[int, int]:
        """Stage -> rank, as observed."""
        out: dict[int, int] = {}
        arr = self.action_arrays()
        for i, r in enumerate(self.ranks):
            for s in arr.rank_stages(i):
                out.setdefault(s, r.rank)
        return dict(sorted(out.items()))

    @property
    def steps(self) -> list[int]:
        """Step indices that hold actions on any rank."""
        return list(self.action_arrays().steps)

    def action_arrays(self) -> ActionArrays:
        """Every action as sorted numpy columns (:mod:`pipeaudit.timeline.columns`)."""
        return self._cached("action_arrays", lambda: action_arrays(self.ranks))

    def orders(self, step: int) -> dict[int, list[Action]]:
        """Per rank, the actions of ``step`` in execution order (by compute start)."""
        arr = self.action_arrays()
        return {r.rank: arr.order(i, step) for i, r in enumerate(self.ranks)}

    @property
    def action_source(self) -> str:
        """How actions were found: annotation, pattern, inferred, mixed or none."""
        sources = {r.source for r in self.ranks if r.source != "none"}
        if not sources:
            return "none"
        return sources.pop() if len(sources) == 1 else "mixed"


_ACTION_DTYPES = [pl.Int64, pl.Int64, pl.Utf8, pl.Int64, pl.Int64, pl.Int64, pl.Utf8, pl.Int64,
                  pl.Int64, pl.Int64, pl.Int64, pl.Int64, pl.Utf8, pl.Int64, pl.Int64]
