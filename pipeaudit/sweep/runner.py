"""Run a sweep: profile every valid grid point with the harness, audit it, save as we go.

Each point runs ``pipeaudit.harness.run_profile`` into ``OUT/runs/<key>/`` and is
audited with ``pipeaudit.load(run_dir).audit()``. A point that fails (a rank
raised, died or hung, or the audit failed) becomes a ``failed`` record with the
error line and the sweep goes on. ``sweep.json``/``sweep.csv`` are rewritten after
every point, so an interrupted sweep can be continued with ``resume=True``,
which keeps every ``ok`` record whose run directory still has its manifest.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from pipeaudit.errors import ConfigError, PipeauditError
from pipeaudit.harness.config import ModelConfig, ProfileConfig
from pipeaudit.harness.manifest import MANIFEST_NAME
from pipeaudit.sweep import results as io
from pipeaudit.sweep.grid import GridEntry, GridPoint, expand_grid
from pipeaudit.sweep.results import SweepRecord, SweepResult

RUNS_DIR = "runs"
#: options that change what a run measures: --resume refuses to mix runs made with different ones
RUN_SHAPING = ("steps", "warmup_steps", "model", "backend", "threads", "seed", "profile_memory")


@dataclass(frozen=True)
class SweepConfig:
    """Everything one sweep needs. Grid lists keep their order."""

    out: str
    schedules: tuple[str, ...]
    stages: tuple[int, ...]
    microbatches: tuple[int, ...]
    chunks: tuple[int, ...] | None = None  #: v for schedules where it is free; None: their default
    steps: int = 2
    warmup_steps: int = 1
    model: ModelConfig = field(default_factory=ModelConfig)
    backend: str = "auto"
    timeout: float = 600.0  #: seconds per run
    threads: int = 1
    seed: int = 0
    profile_memory: bool = True
    resume: bool = False
    force: bool = False

    def options(self) -> dict[str, Any]:
        """The options saved in ``sweep.json``."""
        d = asdict(self)
        for k in ("out", "resume", "force"):
            d.pop(k)
        for k in ("schedules", "stages", "microbatches", "chunks"):
            d[k] = list(d[k]) if d[k] is not None else None
        return d

    def entries(self) -> list[GridEntry]:
        return expand_grid(list(self.schedules), list(self.stages), list(self.microbatches),
                           list(self.chunks) if self.chunks else None, model=self.model,
                           steps=self.steps, warmup_steps=self.warmup_steps)

    def profile_config(self, point: GridPoint, run_dir: Path) -> ProfileConfig:
        m = self.model
        argv = ["pipeaudit", "profile", "--schedule", point.schedule, "--ranks", str(point.stages),
                "--microbatches", str(point.microbatches), "--chunks", str(point.chunks),
                "--steps", str(self.steps), "--warmup-steps", str(self.warmup_steps),
                "--layers", str(m.layers), "--hidden", str(m.hidden), "--ffn-mult", str(m.ffn_mult),
                "--seq-len", str(m.seq_len), "--backend", self.backend, "--threads", str(self.threads),
                "--seed", str(self.seed), "--out", str(run_dir)]
        if m.batch_size is not None:
            argv += ["--batch-size", str(m.batch_size)]
        if self.profile_memory:
            argv.append("--profile-memory")
        return ProfileConfig(
            out=str(run_dir), schedule=point.schedule, stages=point.stages,
            microbatches=point.microbatches, chunks=point.chunks, steps=self.steps,
            warmup_steps=self.warmup_steps, model=self.model, backend=self.backend,
            timeout=self.timeout, profile_memory=self.profile_memory, seed=self.seed,
            threads=self.threads, force=True, command=tuple(argv), progress=False,
        )


class SweepObserver:
    """Progress hooks; the default does nothing."""

    def start(self, total: int) -> None: ...
    def begin(self, index: int, point: GridPoint) -> None: ...
    def done(self, index: int, record: SweepRecord, reused: bool) -> None: ...
    def close(self) -> None: ...


def check_out(cfg: SweepConfig) -> SweepResult | None:
    """Refuse a non-empty ``out`` without resume/force; with resume return the saved result."""
    out = Path(cfg.out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{cfg.out}: --out exists and is not a directory")
    saved = out / io.JSON_NAME
    if cfg.resume and saved.exists():
        prev = io.load(out)
        _check_same_options(prev, cfg)
        return prev
    if out.is_dir() and any(out.iterdir()) and not cfg.force:
        hint = "use --resume to continue a sweep" if saved.exists() else "choose an empty directory"
        raise ConfigError(f"{cfg.out}: --out is not empty ({hint}, or --force to write into it)")
    return None


def _check_same_options(prev: SweepResult, cfg: SweepConfig) -> None:
    now = cfg.options()
    diffs = [f"{k} {prev.options.get(k)!r} -> {now[k]!r}" for k in RUN_SHAPING
             if prev.options.get(k) != now[k]]
    if diffs:
        raise ConfigError(
            f"{Path(cfg.out) / io.JSON_NAME}: --resume with options that change what runs measure "
            f"({'; '.join(diffs)}); use the same options, or a new --out"
        )


def run_sweep(cfg: SweepConfig, observer: SweepObserver | None = None,
              runner: Callable[[ProfileConfig], Any] | None = None) -> SweepResult:
    """Profile and audit every grid point of ``cfg``; return (and save) the result.

    ``runner`` runs one harness configuration (default :func:`pipeaudit.harness.run_profile`).
    """
    from pipeaudit.harness import run_profile

    runner = runner or run_profile
    obs = observer or SweepObserver()
    entries = cfg.entries()
    prev = check_out(cfg)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    reusable = {r.key: r for r in (prev.records if prev else [])
                if r.status == "ok" and (out / RUNS_DIR / r.key / MANIFEST_NAME).is_file()}
    done: dict[str, SweepRecord] = {}
    result = SweepResult(options=cfg.options(), records=[])

    def snapshot() -> None:
        keys = [e.point.key for e in entries]
        result.records = [done[k] if k in done else reusable[k] for k in keys
                          if k in done or k in reusable]
        io.save(result, out)

    obs.start(len(entries))
    try:
        for i, entry in enumerate(entries):
            p = entry.point
            obs.begin(i, p)
            if entry.skip_reason is not None:
                rec, reused = _base(p, "skipped", entry.skip_reason), False
            elif p.key in reusable:
                rec, reused = reusable[p.key], True
            else:
                rec, reused = run_point(cfg, p, out, runner), False
            done[p.key] = rec
            snapshot()
            obs.done(i, rec, reused)
    finally:
        obs.close()
    return result


def _base(p: GridPoint, status: str, reason: str | None = None) -> SweepRecord:
    return SweepRecord(key=p.key, schedule=p.schedule, stages=p.stages, microbatches=p.microbatches,
                       chunks=p.chunks, status=status, reason=reason)


def _first_line(text: str) -> str:
    lines = [ln for ln in str(text).splitlines() if ln.strip()]
    return lines[0].strip() if lines else ""


def run_point(cfg: SweepConfig, p: GridPoint, out: Path,
              runner: Callable[[ProfileConfig], Any]) -> SweepRecord:
    """Profile one point into ``out/runs/<key>`` and audit it; never raises for a failed run."""
    run_dir = out / RUNS_DIR / p.key
    rel = f"{RUNS_DIR}/{p.key}"
    if run_dir.exists():
        shutil.rmtree(run_dir)  # a failed or stale attempt of this very point
    t0 = time.monotonic()
    try:
        manifest = runner(cfg.profile_config(p, run_dir))
    except PipeauditError as exc:
        return _failed(p, f"profile: {_first_line(str(exc))}", rel, t0)
    except Exception as exc:  # a crash of the run is reported, not fatal
        return _failed(p, f"profile: {type(exc).__name__}: {_first_line(str(exc))}", rel, t0)
    try:
        rec = audit_point(p, run_dir, manifest)
    except PipeauditError as exc:
        return _failed(p, f"audit: {_first_line(str(exc))}", rel, t0)
    except Exception as exc:
        return _failed(p, f"audit: {type(exc).__name__}: {_first_line(str(exc))}", rel, t0)
    rec.run_dir = rel
    rec.wall_s = round(time.monotonic() - t0, 3)
    return rec


def _failed(p: GridPoint, reason: str, rel: str, t0: float) -> SweepRecord:
    rec = _base(p, "failed", reason)
    rec.run_dir = rel
    rec.wall_s = round(time.monotonic() - t0, 3)
    return rec


def audit_point(p: GridPoint, run_dir: Path, manifest: dict[str, Any] | None) -> SweepRecord:
    """The record of a finished run, from ``pipeaudit.load(run_dir).audit()``."""
    import pipeaudit

    res = pipeaudit.load(str(run_dir), jobs=1).audit()
    if not res.pipeline_found:
        raise ConfigError(f"{run_dir}: no pipeline actions found in the traces")
    b = res.bubble
    step_us = res.step_time_us
    batch = (manifest or res.manifest or {}).get("model", {}).get("batch_size")
    peaks = [r.peak_allocated_bytes for r in res.ranks if r.peak_allocated_bytes is not None]
    expected = [s.expected_peak_inflight for s in res.stages if s.expected_peak_inflight is not None]
    rec = _base(p, "ok")
    rec.measured_bubble = b.measured
    rec.theory_bubble = b.theory
    rec.theory_formula = b.theory_formula
    if b.published:
        rec.published_bubble = b.published["value"]
        rec.published_formula = f"{b.published['formula']} ({b.published['source']})"
    rec.replay_ideal = b.replay_ideal
    rec.step_time_us = step_us
    rec.global_batch = int(batch) if batch is not None else None
    rec.throughput_samples_s = (batch / (step_us / 1e6)) if batch and step_us else None
    rec.peak_memory_bytes = max(peaks) if peaks else None
    rec.peak_inflight = max((s.peak_inflight for s in res.stages), default=None)
    rec.expected_peak_inflight = max(expected) if expected else None
    rec.findings = [f.code for f in res.findings]
    return rec
