"""The notebook API: ``pipeaudit.load(paths)`` returns a :class:`Run`.

    run = pipeaudit.load("sample_traces/1f1b_p4_m8")
    run.audit().bubble.measured
    run.actions()          # polars DataFrame, one row per action
    run.stages().to_pandas()
"""

from __future__ import annotations

import os
from dataclasses import asdict
from functools import cached_property
from typing import Sequence

import polars as pl

from pipeaudit.audit.result import AuditResult
from pipeaudit.options import LoadOptions
from pipeaudit.timeline.model import Timeline


class Run:
    """One pipeline run loaded from its traces."""

    def __init__(self, timeline: Timeline, schedule: str | None = None) -> None:
        if schedule is not None:
            from pipeaudit.schedules import canonical_name

            canonical_name(schedule)  # an unknown name is an error, listing the known ones
        self.timeline = timeline
        self._schedule = schedule

    @cached_property
    def _audit(self) -> AuditResult:
        from pipeaudit.audit.run import audit

        result = audit(self.timeline, schedule=self._schedule)
        if any(f.code == "STAGE_IMBALANCE" for f in result.findings):
            # where the layers per stage are known, it names the split advise proposes
            from pipeaudit.advise.imbalance import with_split_advice

            result = with_split_advice(self.timeline, result)
        return result

    def audit(self) -> AuditResult:
        """The same audit result the CLI reports."""
        return self._audit

    def actions(self) -> pl.DataFrame:
        """One row per action: rank, stage, kind, microbatch, step, span and compute (ns)."""
        return self.timeline.actions.with_columns(
            compute_us=pl.col("compute_ns") / 1000.0,
            span_us=(pl.col("end") - pl.col("start")) / 1000.0,
        )

    def ranks(self) -> pl.DataFrame:
        """Per-rank metrics (bubble, idle, compute, communication, memory)."""
        rows = [asdict(r) for r in self._audit.ranks]
        for r in rows:
            r.pop("bubble_by_step")
        return pl.DataFrame(rows)

    def stages(self) -> pl.DataFrame:
        """Per-stage metrics: counts and compute by kind, in-flight peak vs theory."""
        rows = []
        for s in self._audit.stages:
            row = {"stage": s.stage, "rank": s.rank, "peak_inflight": s.peak_inflight,
                   "expected_peak_inflight": s.expected_peak_inflight}
            for k in ("F", "B", "I", "W"):
                row[f"n_{k}"] = s.actions[k]
                row[f"compute_us_{k}"] = s.compute_us[k]
                row[f"mean_us_{k}"] = s.mean_compute_us[k]
            rows.append(row)
        return pl.DataFrame(rows)

    def steps(self) -> pl.DataFrame:
        """Per-step window, step time, bubble and replay ideal."""
        return pl.DataFrame([asdict(s) for s in self._audit.steps])

    def per_step(self) -> pl.DataFrame:
        """One row per audited step: step time, pipeline bubble, exposed communication and
        stage imbalance, then each rank's bubble (``rank{r}_bubble``) and each stage's compute
        (``stage{s}_compute_us``): the audit's ``per_step`` series, what the gate compares."""
        s = self._audit.per_step
        if s is None:
            return pl.DataFrame()
        cols: dict[str, list] = {"step": s.steps, "step_time_us": s.step_time_us,
                                 "bubble": s.bubble, "exposed_comm": s.exposed_comm,
                                 "imbalance": s.imbalance}
        cols.update({f"rank{r}_bubble": v for r, v in sorted(s.rank_bubble.items())})
        cols.update({f"stage{st}_compute_us": s.stage_total_us(st) for st in sorted(s.stage_compute_us)})
        return pl.DataFrame(cols)

    def pipelines(self) -> pl.DataFrame:
        """One row per pipeline replica: ranks, bubble, replay ideal, median step time, slowest
        stage (one row for a single pipeline)."""
        rows = [asdict(p) for p in self._audit.pipelines]
        return pl.DataFrame(rows) if rows else pl.DataFrame()

    def pipeline(self, index: int) -> "Run":
        """The run of pipeline replica ``index`` alone (its own audit, explain and what-if)."""
        return Run(self.timeline.replica(index), schedule=self._schedule)

    def findings(self) -> pl.DataFrame:
        """Findings as a table (code, severity, rank, stage, measured, expected, message)."""
        schema = {"code": pl.Utf8, "severity": pl.Utf8, "rank": pl.Int64, "stage": pl.Int64,
                  "measured": pl.Float64, "expected": pl.Float64, "message": pl.Utf8}
        return pl.DataFrame([asdict(f) for f in self._audit.findings], schema=schema)

    def to_dict(self) -> dict:
        """The JSON document of ``pipeaudit analyze --format json``."""
        return self._audit.to_dict()

    def advise(self, *, memory_cap: int | None = None, schedules: list[str] | None = None,
               microbatches: list[int] | None = None, global_batch: int | None = None,
               stage_layers: list[int] | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
        """(the measured configuration, the ranked candidates) as frames: what
        ``pipeaudit advise --format json`` holds (:func:`pipeaudit.advise.advise`);
        ``stage_layers``: how the run was cut, when its manifest does not say."""
        from pipeaudit.advise import advise

        a = advise(self, memory_cap=memory_cap, schedules=schedules, microbatches=microbatches,
                   global_batch=global_batch, stage_layers=stage_layers)
        return pl.DataFrame([a.measured]), pl.DataFrame([c.to_dict() for c in a.candidates])


def load(
    paths: str | os.PathLike | Sequence[str | os.PathLike],
    *,
    schedule: str | None = None,
    action_pattern: str | None = None,
    num_microbatches: int | None = None,
    num_steps: int | None = None,
    layout: str | None = None,
    jobs: int | None = None,
    executor: str | None = None,
    max_memory: int | str | None = None,
    allow_missing: bool = False,
    salvage: bool = False,
    options: LoadOptions | None = None,
    window: str | None = None,
) -> Run:
    """Load a run's traces (files, directories or globs) for analysis.

    The keywords are :class:`~pipeaudit.options.LoadOptions`' (see there what each means);
    ``options`` gives them all at once instead. ``jobs``: ranks decoded at once on this
    machine, this process included (default: the cores, or every rank at once for up to two
    ranks per core and 16 ranks); ``executor``: ``"local"``
    (default), ``"processes"`` or ``"dask://host:port"``; ``max_memory``: the decode's memory
    budget (bytes or text such as ``"4G"``; default half the available memory; files too
    big for a job's share are streamed). See docs/performance.md; :mod:`pipeaudit.progress`
    reports ranks as they are done. ``salvage=True``: analyse the complete events of
    truncated or corrupt trace files; the steps the damage cut are excluded and the audit
    says what was lost (``TRUNCATED_TRACE``). ``num_microbatches`` / ``num_steps``: state M
    or the number of steps for traces that show neither (see
    :mod:`pipeaudit.timeline.stepping`); ``layout``: e.g. ``"pp=4,dp=2"`` when the traces do
    not say which ranks form each pipeline replica. ``window``: for a folder of several
    profiling cycles (torch's ``{worker}.{ns}`` names, the handler's ``pipeaudit/step_N/``,
    ``iteration_N/``), ``"latest"`` or a label as ``pipeaudit watch`` prints it reads that
    window (:func:`pipeaudit.trace.window_select.select_windows` lists them); None reads the
    inputs as given.
    """
    from pipeaudit.timeline.build import build_timeline

    if options is None:
        options = LoadOptions(schedule=schedule, action_pattern=action_pattern,
                              num_microbatches=num_microbatches, num_steps=num_steps,
                              layout=layout, jobs=jobs, executor=executor, max_memory=max_memory,
                              allow_missing=allow_missing, salvage=salvage)
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    if window is not None:
        from pipeaudit.trace.window_select import select_windows

        if window == "all":
            from pipeaudit.errors import ConfigError

            raise ConfigError("load reads one window: select_windows(paths, 'all') lists them")
        sel = select_windows(paths, window)
        paths = sel.paths(sel.chosen[0])
    tl = build_timeline([str(p) for p in paths], options)
    return Run(tl, schedule=options.schedule)
