"""What a trace file says about its window, read cheaply: :mod:`pipeaudit.trace.traceinfo`
(the trace layer's, where window discovery reads it); these names stay here for the worker."""

from __future__ import annotations

from pipeaudit.trace.traceinfo import TraceInfo, dist_of, read_head, read_info

__all__ = ["TraceInfo", "dist_of", "read_head", "read_info"]
