"""The cross-rank timeline of a run: every rank's reduced timeline plus run facts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from pipeaudit.actions import Action
from pipeaudit.timeline.rank import ACTION_COLUMNS, RankTimeline


@dataclass
class Timeline:
    """All ranks of one run, on one clock."""

    ranks: list[RankTimeline]
    manifest: dict[str, Any] | None = None
    inputs: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def actions(self) -> pl.DataFrame:
        """Every action of every rank (``ACTION_COLUMNS``), sorted by rank then start."""
        frames = [r.actions for r in self.ranks if r.actions.height]
        if not frames:
            return pl.DataFrame(schema={c: r for c, r in zip(ACTION_COLUMNS, _ACTION_DTYPES)})
        return pl.concat(frames).sort(["rank", "start"])

    @property
    def placement(self) -> dict[int, int]:
        """Stage -> rank, as observed."""
        out: dict[int, int] = {}
        for r in self.ranks:
            for s in r.actions["stage"].unique().to_list():
                out.setdefault(int(s), r.rank)
        return dict(sorted(out.items()))

    @property
    def steps(self) -> list[int]:
        """Step indices that hold actions on any rank."""
        a = self.actions
        return sorted(int(s) for s in a["step"].unique().to_list()) if a.height else []

    def orders(self, step: int) -> dict[int, list[Action]]:
        """Per rank, the actions of ``step`` in execution order (by compute start)."""
        by_step = self._orders_by_step()
        return {r.rank: list(by_step[i].get(step, [])) for i, r in enumerate(self.ranks)}

    def _orders_by_step(self) -> list[dict[int, list[Action]]]:
        """Every step's order per rank, computed in one pass (kept while the action tables
        stay the same objects)."""
        key = [id(r.actions) for r in self.ranks]
        cached = self.__dict__.get("_orders_cache")
        if cached is not None and cached[0] == key:
            return cached[1]
        out: list[dict[int, list[Action]]] = []
        for r in self.ranks:
            steps: dict[int, list[Action]] = {}
            a = r.actions.sort(["compute_start", "start"], maintain_order=True)
            for k, s, kind, m in a.select("step", "stage", "kind", "microbatch").iter_rows():
                steps.setdefault(k, []).append(Action(int(s), str(kind), int(m)))
            out.append(steps)
        self.__dict__["_orders_cache"] = (key, out)
        return out

    @property
    def action_source(self) -> str:
        """How actions were found: annotation, pattern, inferred, mixed or none."""
        sources = {r.source for r in self.ranks if r.source != "none"}
        if not sources:
            return "none"
        return sources.pop() if len(sources) == 1 else "mixed"


_ACTION_DTYPES = [pl.Int64, pl.Int64, pl.Utf8, pl.Int64, pl.Int64, pl.Int64, pl.Utf8, pl.Int64,
                  pl.Int64, pl.Int64, pl.Int64, pl.Int64, pl.Utf8]
