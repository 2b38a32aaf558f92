"""pipeaudit: trace analysis and schedule audit for pipeline-parallel training.

The library imports without torch, click or HTA. Entry point for notebooks and scripts:
``pipeaudit.load(paths)`` -> :class:`pipeaudit.api.Run` (audit, polars/pandas frames);
:mod:`pipeaudit.progress` reports ranks as they are decoded.
"""

from __future__ import annotations

from pipeaudit.actions import Action
from pipeaudit.errors import ConfigError, PipeauditError, ScheduleError, TraceError

__version__ = "0.1.0"
SCHEMA_VERSION = 1

#: Attributes imported on first use, so that ``import pipeaudit`` stays light (no polars).
_LAZY = {"load": ("pipeaudit.api", "load"), "Run": ("pipeaudit.api", "Run"),
         "LoadOptions": ("pipeaudit.options", "LoadOptions")}


def __getattr__(name: str):
    """``pipeaudit.load`` (with its own signature and docstring), ``Run``, ``LoadOptions``."""
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'pipeaudit' has no attribute {name!r}")


__all__ = [
    "Action",
    "LoadOptions",
    "Run",
    "load",
    "ConfigError",
    "PipeauditError",
    "ScheduleError",
    "TraceError",
    "SCHEMA_VERSION",
    "__version__",
]
