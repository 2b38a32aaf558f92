"""A run reduced to what the gate and diff compare, and the baseline file that stores it.

A :class:`Snapshot` holds the run's configuration (schedule, P, stages, M, v,
world size) and its audit result (the ``analyze --format json`` document), whose
``per_step`` series the gate compares. It comes from traces (:func:`snapshot_from_run`),
from a baseline file written by ``pipeaudit baseline``, or from a saved
``analyze --format json`` document (one written before the audit held ``per_step`` has no
series: ``diff`` only).
"""

from __future__ import annotations

import datetime as _dt
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import msgspec

from pipeaudit import SCHEMA_VERSION, __version__
from pipeaudit.audit.result import AuditResult, StepSeries
from pipeaudit.options import LoadOptions
from pipeaudit.errors import ConfigError

BASELINE_KIND = "baseline"
CONFIG_FIELDS = ("schedule", "num_ranks", "num_stages", "num_microbatches", "num_chunks",
                 "world_size")
_LABELS = {"schedule": "schedule", "num_ranks": "P", "num_stages": "stages",
           "num_microbatches": "M", "num_chunks": "v", "world_size": "world size"}


class RunConfig(msgspec.Struct, kw_only=True):
    """What must match for two runs to be compared: schedule, P, stages, M, v, world size."""

    schedule: str | None
    num_ranks: int
    num_stages: int
    num_microbatches: int
    num_chunks: int
    world_size: int

    def differences(self, other: "RunConfig") -> list[str]:
        """``["M 8 -> 4", ...]`` for each field that differs (self is the baseline)."""
        out = []
        for f in CONFIG_FIELDS:
            a, b = getattr(self, f), getattr(other, f)
            if a != b:
                out.append(f"{_LABELS[f]} {a} -> {b}")
        return out

    def describe(self) -> str:
        return (f"{self.schedule or 'unknown'} P={self.num_ranks} stages={self.num_stages} "
                f"M={self.num_microbatches} v={self.num_chunks} world={self.world_size}")


class BaselineDoc(msgspec.Struct, kw_only=True):
    """The baseline file: configuration, per-step series and the full audit document.
    ``series`` is the audit's ``per_step`` (kept at the top level, where baselines written
    before the audit held it have it)."""

    schema_version: int
    tool: str
    kind: str
    pipeaudit_version: str | None = None
    created: str | None = None
    config: RunConfig
    series: StepSeries
    audit: AuditResult


class _Header(msgspec.Struct):
    schema_version: Any = None
    tool: Any = None
    kind: Any = None


@dataclass
class Snapshot:
    """One run as the gate and diff see it."""

    config: RunConfig
    audit: AuditResult
    source: str  # what it was read from (a baseline path or the trace inputs)
    kind: str  # traces | baseline | analyze
    notes: list[str] = field(default_factory=list)  #: what a comparison should say of it

    @property
    def series(self) -> StepSeries | None:
        """The run's per-step series (the audit's ``per_step``)."""
        return self.audit.per_step

    def to_baseline(self) -> BaselineDoc:
        """The baseline document of this snapshot (needs its per-step series)."""
        if self.series is None:
            raise ConfigError(f"{self.source}: has no per-step series to store in a baseline")
        return BaselineDoc(schema_version=SCHEMA_VERSION, tool="pipeaudit", kind=BASELINE_KIND,
                           pipeaudit_version=__version__,
                           created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                           config=self.config, series=self.series, audit=self.audit)


def config_of(result: AuditResult, world_size: int | None = None) -> RunConfig:
    """The configuration an audit result describes."""
    manifest = result.manifest or {}
    ws = world_size or manifest.get("world_size") or result.num_ranks
    return RunConfig(schedule=result.schedule, num_ranks=result.num_ranks,
                     num_stages=result.num_stages, num_microbatches=result.num_microbatches,
                     num_chunks=result.num_chunks, world_size=int(ws))


def snapshot_from_run(run, source: str | None = None, paths: Sequence[str] = ()) -> Snapshot:
    """Snapshot of a loaded :class:`pipeaudit.api.Run` (audit + per-step series; ``paths``:
    the inputs as given, named when the run holds no pipeline)."""
    from pipeaudit.audit.found import require_pipeline

    require_pipeline(run, paths)
    result = run.audit()
    src = source or _describe_inputs(result.inputs)
    sizes = [rt.world_size for rt in run.timeline.ranks if rt.world_size]
    return Snapshot(config=config_of(result, max(sizes) if sizes else None), audit=result,
                    source=src, kind="traces")


def _describe_inputs(inputs: list[str]) -> str:
    """The run's directory when all its traces lie in one, else the first files."""
    dirs = {os.path.dirname(p) for p in inputs}
    if len(dirs) == 1 and len(inputs) > 1:
        return (dirs.pop() or ".") + os.sep
    return ", ".join(inputs[:2]) + (f" (+{len(inputs) - 2} more)" if len(inputs) > 2 else "")


def baseline_json(snapshot: Snapshot) -> str:
    """Pretty JSON text of the baseline document of ``snapshot``."""
    from pipeaudit.jsontext import to_json

    doc = msgspec.to_builtins(snapshot.to_baseline())
    audit = snapshot.audit.to_dict()
    doc["audit"] = audit
    return to_json(doc) + "\n"


def read_document(path: str | os.PathLike, *, baseline_only: bool = False) -> Snapshot:
    """Read a baseline file (or, unless ``baseline_only``, an ``analyze`` JSON document).

    Every problem raises :class:`ConfigError` with one line naming the file.
    """
    p = str(path)
    try:
        raw = Path(p).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read: {exc.strerror or exc}") from None
    try:
        head = msgspec.json.decode(raw, type=_Header)
    except msgspec.ValidationError:  # a subclass of DecodeError: valid JSON, not an object
        raise ConfigError(f"{p}: not a pipeaudit baseline: expected a JSON object") from None
    except msgspec.DecodeError as exc:
        raise ConfigError(f"{p}: not a pipeaudit baseline: not valid JSON ({exc})") from None
    what = "baseline" if baseline_only else "baseline or analyze document"
    if head.tool != "pipeaudit":
        raise ConfigError(f"{p}: not a pipeaudit {what} (no \"tool\": \"pipeaudit\" field)")
    if not isinstance(head.schema_version, int) or isinstance(head.schema_version, bool):
        raise ConfigError(f"{p}: not a pipeaudit {what} (schema_version missing or not an integer)")
    if head.schema_version != SCHEMA_VERSION:
        raise ConfigError(f"{p}: schema_version {head.schema_version} is not supported "
                          f"(this pipeaudit reads {SCHEMA_VERSION}); re-create it with "
                          "`pipeaudit baseline`")
    if head.kind == BASELINE_KIND:
        try:
            doc = msgspec.json.decode(raw, type=BaselineDoc)
        except msgspec.ValidationError as exc:
            raise ConfigError(f"{p}: damaged baseline: {exc}") from None
        if len(doc.series.steps) == 0:
            raise ConfigError(f"{p}: damaged baseline: its series hold no step")
        _check_series(p, doc.series)
        notes = [] if doc.audit.per_step is not None else [
            f"{p} was written by an earlier pipeaudit: its exposed communication counts the "
            "time receives wait for their sender (now bubble, left out), so it reads higher "
            "than this run's; re-create it with `pipeaudit baseline`"]
        doc.audit.per_step = doc.series
        return Snapshot(config=doc.config, audit=doc.audit, source=p, kind="baseline",
                        notes=notes)
    if baseline_only:
        hint = ("an analyze report, not a baseline; make one with `pipeaudit baseline RUN -o FILE`"
                if head.kind is None else f"kind {head.kind!r} is not a baseline")
        raise ConfigError(f"{p}: {hint}")
    try:
        result = msgspec.json.decode(raw, type=AuditResult)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{p}: damaged analyze document: {exc}") from None
    if not result.pipeline_found:
        raise ConfigError(f"{p}: the analyzed run has no pipeline actions; nothing to compare")
    if result.per_step is not None:
        _check_series(p, result.per_step, "analyze document", "per_step")
    return Snapshot(config=config_of(result), audit=result, source=p, kind="analyze")


def _check_series(p: str, s: StepSeries, what: str = "baseline", key: str = "series") -> None:
    n = len(s.steps)
    lists = [("step_time_us", s.step_time_us), ("bubble", s.bubble),
             ("exposed_comm", s.exposed_comm), ("imbalance", s.imbalance)]
    lists += [(f"rank_bubble.{r}", v) for r, v in s.rank_bubble.items()]
    lists += [(f"rank_exposed_comm.{r}", v) for r, v in s.rank_exposed_comm.items()]
    lists += [(f"stage_peak_inflight.{st}", v) for st, v in s.stage_peak_inflight.items()]
    lists += [(f"rank_peak_memory.{r}", v) for r, v in s.rank_peak_memory.items()]
    lists += [(f"stage_compute_us.{st}.{k}", v) for st, d in s.stage_compute_us.items()
              for k, v in d.items()]
    for name, v in lists:
        if len(v) != n:
            raise ConfigError(f"{p}: damaged {what}: {key}.{name} has {len(v)} values for "
                              f"{n} steps")


def is_document(path: str) -> bool:
    """True when ``path`` looks like a pipeaudit JSON document rather than a trace."""
    if not (path.endswith(".json") and os.path.isfile(path)):
        return False
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    return b'"tool"' in head and b"pipeaudit" in head and b"traceEvents" not in head


def load_snapshot(paths: Sequence[str], *, allow_analyze: bool = False,
                  options: LoadOptions | None = None, load=None) -> Snapshot:
    """A run from trace files/directories/globs (read with ``options`` by ``load(paths,
    options)``, default :func:`pipeaudit.load`), or from one saved baseline (or analyze)
    file."""
    paths = [str(p) for p in paths]
    if len(paths) == 1 and is_document(paths[0]):
        return read_document(paths[0], baseline_only=not allow_analyze)
    if load is None:
        from pipeaudit.api import load as api_load

        def load(p, options):
            return api_load(p, options=options)

    return snapshot_from_run(load(paths, options), paths=paths)
