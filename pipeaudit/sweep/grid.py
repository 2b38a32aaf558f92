"""Grid expansion: schedules x P x M (x v), each point valid or skipped with the reason.

Validation is the harness's own (:meth:`ProfileConfig.validate`, torch-free), so
a point is skipped here exactly when ``pipeaudit profile`` would refuse it.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeaudit.errors import ConfigError
from pipeaudit.harness.catalog import get_spec
from pipeaudit.harness.config import ModelConfig, ProfileConfig


@dataclass(frozen=True)
class GridPoint:
    """One (schedule, P, M, v) combination of a sweep."""

    schedule: str
    stages: int  #: P
    microbatches: int  #: M
    chunks: int  #: v

    @property
    def key(self) -> str:
        """Run directory name: ``<schedule>_p<P>_m<M>`` plus ``_v<v>`` when v is a free choice."""
        base = f"{self.schedule}_p{self.stages}_m{self.microbatches}"
        return base + (f"_v{self.chunks}" if get_spec(self.schedule).fixed_chunks is None else "")


@dataclass(frozen=True)
class GridEntry:
    """A grid point and, when the harness cannot run it, why."""

    point: GridPoint
    skip_reason: str | None = None


def parse_int_list(text: str, option: str) -> list[int]:
    """``"2,4,8"`` -> ``[2, 4, 8]`` (order kept, duplicates dropped); ConfigError on junk."""
    out: list[int] = []
    for item in text.split(","):
        item = item.strip()
        try:
            value = int(item)
        except ValueError:
            raise ConfigError(f"{option} expects comma-separated integers, got {text!r}") from None
        if value < 1:
            raise ConfigError(f"{option} values must be >= 1, got {value}")
        if value not in out:
            out.append(value)
    return out


def parse_schedules(text: str) -> list[str]:
    """``"naive,gpipe"`` -> names, each checked against the harness catalogue."""
    names = []
    for item in text.split(","):
        name = item.strip()
        if not name:
            continue
        get_spec(name)  # ConfigError listing the known names
        if name not in names:
            names.append(name)
    if not names:
        raise ConfigError("--schedules is empty")
    return names


def expand_grid(schedules: list[str], stages: list[int], microbatches: list[int],
                chunks: list[int] | None = None, *, model: ModelConfig | None = None,
                steps: int = 2, warmup_steps: int = 1) -> list[GridEntry]:
    """Every combination in schedule, P, M order (v innermost), with the harness's verdict.

    ``chunks`` applies to schedules whose stages per rank are a free choice
    (interleaved-1f1b, looped-bfs, interleaved-zb); the others use their fixed v.
    """
    model = model or ModelConfig()
    out = []
    for name in schedules:
        spec = get_spec(name)
        vs = [spec.fixed_chunks] if spec.fixed_chunks is not None else (chunks or [spec.default_chunks])
        for p in stages:
            for m in microbatches:
                for v in vs:
                    point = GridPoint(name, p, m, v)
                    cfg = ProfileConfig(out="-", schedule=name, stages=p, microbatches=m, chunks=v,
                                        steps=steps, warmup_steps=warmup_steps, model=model)
                    try:
                        cfg.validate(check_out=False)
                        out.append(GridEntry(point))
                    except ConfigError as exc:
                        out.append(GridEntry(point, str(exc)))
    return out
