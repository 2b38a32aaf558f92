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

def load(*args, **kwargs):  # noqa: D401 - thin re-export, keeps import light
    """Load a run's traces; see :func:`pipeaudit.api.load`."""
    from pipeaudit.api import load as _load

    return _load(*args, **kwargs)


__all__ = [
    "Action",
    "load",
    "ConfigError",
    "PipeauditError",
    "ScheduleError",
    "TraceError",
    "SCHEMA_VERSION",
    "__version__",
]
