"""Gate thresholds and budgets: defaults, the ``[tool.pipeaudit.gate]`` table, options.

Thresholds limit the change against a baseline; budgets limit the run itself
and need no baseline. Values are numbers; fractions may also be written as
percentages (``"10%"``), and any threshold or budget can be switched off with
``"off"``. Options given on the command line override the file.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Mapping

from pipeaudit.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib


@dataclass(frozen=True)
class Thresholds:
    """Limits of one gate run. ``None`` switches a check off."""

    # against a baseline (change of the median of per-step values)
    max_bubble_increase: float | None = 0.03  # absolute, fraction of the step
    max_rank_bubble_increase: float | None = 0.05  # absolute, per rank
    max_step_time_increase: float | None = 0.10  # relative
    max_stage_compute_increase: float | None = 0.15  # relative, per stage
    max_imbalance_increase: float | None = 0.15  # absolute, on max/median stage compute
    max_exposed_comm_increase: float | None = 0.05  # absolute, fraction of the step
    max_peak_memory_increase: float | None = 0.10  # relative, per rank
    max_inflight_increase: float | None = 0.0  # microbatches, per stage
    noise_k: float = 3.0  # a change must also exceed noise_k standard errors of the medians' change
    #: relative: a slowdown every stage shares with the pipeline's shape held (a slower or
    #: busier host) fails the step-time and stage-compute checks past this; None: it warns
    max_host_slowdown: float | None = None
    # budgets (no baseline needed)
    max_bubble: float | None = None
    max_bubble_over_theory: float | None = None
    max_rank_bubble: float | None = None
    max_step_time_ms: float | None = None
    max_imbalance: float | None = None
    max_exposed_comm: float | None = None
    max_peak_memory_mib: float | None = None
    #: the job's slowest pipeline replica against its fastest, relative (several replicas only)
    max_replica_spread: float | None = None

    def budgets(self) -> dict[str, float]:
        """The budgets that are set."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name in BUDGETS and getattr(self, f.name) is not None}

    def to_dict(self) -> dict[str, float | None]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


KEYS = tuple(f.name for f in fields(Thresholds))
BUDGETS = ("max_bubble", "max_bubble_over_theory", "max_rank_bubble", "max_step_time_ms",
           "max_imbalance", "max_exposed_comm", "max_peak_memory_mib", "max_replica_spread")
PERCENT_OK = {"max_bubble_increase", "max_rank_bubble_increase", "max_step_time_increase",
              "max_stage_compute_increase", "max_exposed_comm_increase",
              "max_peak_memory_increase", "max_host_slowdown", "max_bubble",
              "max_bubble_over_theory", "max_rank_bubble", "max_exposed_comm",
              "max_replica_spread"}


def parse_value(key: str, value: Any, label: str | None = None) -> float | None:
    """A threshold value from TOML or the command line: number, ``"N%"`` or ``"off"``.

    ``label`` names the setting in error messages (default ``--key-name``).
    """
    label = label or f"--{key.replace('_', '-')}"
    bad = f"{label} = {value!r}: expected a number, a percentage or \"off\""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ConfigError(bad)
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("off", "none", "disabled"):
            if key == "noise_k":
                raise ConfigError(f"{label} cannot be off (use 0 to ignore noise)")
            return None
        try:
            x = float(text[:-1]) / 100 if text.endswith("%") else float(text)
        except ValueError:
            raise ConfigError(bad) from None
        if text.endswith("%") and key not in PERCENT_OK:
            raise ConfigError(f"{label} = {value!r}: takes a plain number, not a percentage")
    else:
        x = float(value)
    if x != x or x < 0 or x == float("inf"):
        raise ConfigError(f"{label} = {value!r}: must be a finite number >= 0")
    return x


def find_pyproject(start: str | os.PathLike | None = None) -> Path | None:
    """The nearest pyproject.toml with a ``[tool.pipeaudit.gate]`` table, from ``start`` upwards."""
    here = Path(start or os.getcwd()).resolve()
    for d in (here, *here.parents):
        p = d / "pyproject.toml"
        if p.is_file():
            table = _read_toml(p).get("tool", {}).get("pipeaudit", {}).get("gate")
            if table is not None:
                return p
    return None


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None


def table_of(path: str | os.PathLike) -> dict[str, Any]:
    """The gate table of a TOML file: ``[tool.pipeaudit.gate]``, else ``[gate]``, else the top level."""
    doc = _read_toml(Path(path))
    gate = doc.get("tool", {}).get("pipeaudit", {}).get("gate")
    if gate is None:
        gate = doc.get("gate", doc)
    if not isinstance(gate, dict):
        raise ConfigError(f"{path}: the gate table is not a table")
    return gate


def load_thresholds(options: Mapping[str, Any] | None = None, *, config: str | None = None,
                    search_from: str | os.PathLike | None = None,
                    search: bool = True) -> tuple[Thresholds, str | None]:
    """Defaults, then the config file (``config`` or, when ``search``, the nearest
    pyproject.toml with a gate table from ``search_from`` or the cwd upwards), then ``options``.

    Returns the thresholds and the file they were read from (None when none).
    """
    th = Thresholds()
    path: Path | None = Path(config) if config else (find_pyproject(search_from) if search
                                                      else None)
    if path is not None:
        if config and not path.is_file():
            raise ConfigError(f"{path}: no such config file")
        table = table_of(path)
        where = f"{path} [tool.pipeaudit.gate]" if path.name == "pyproject.toml" else str(path)
        th = _apply(th, table, where)
    if options:
        th = _apply(th, {k: v for k, v in options.items() if v is not None}, None)
    return th, (str(path) if path is not None else None)


def _apply(th: Thresholds, table: Mapping[str, Any], where: str | None) -> Thresholds:
    changes: dict[str, Any] = {}
    for key, value in table.items():
        name = key.replace("-", "_")
        if name not in KEYS:
            raise ConfigError(f"{where or 'options'}: unknown key {key!r} "
                              f"(known: {', '.join(KEYS)})")
        changes[name] = parse_value(name, value, f"{where}: {name}" if where else None)
    return replace(th, **changes)
