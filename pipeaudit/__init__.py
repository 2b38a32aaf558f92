"""pipeaudit: trace analysis and schedule audit for pipeline-parallel training.

The library imports without torch, click or HTA. Entry points for notebooks:
``pipeaudit.load(paths)`` (added by the audit layer).
"""

from __future__ import annotations

from pipeaudit.actions import Action
from pipeaudit.errors import ConfigError, PipeauditError, ScheduleError, TraceError

__version__ = "0.1.0"
SCHEMA_VERSION = 1

__all__ = [
    "Action",
    "ConfigError",
    "PipeauditError",
    "ScheduleError",
    "TraceError",
    "SCHEMA_VERSION",
    "__version__",
]
