"""``pipeaudit.profiler.trace_handler``: a drop-in for ``torch.profiler.tensorboard_trace_handler``
that audits every profiled window while the training runs (see docs/during-training.md).

    from pipeaudit.profiler import trace_handler
    with torch.profiler.profile(schedule=torch.profiler.schedule(wait=1, warmup=1, active=2,
                                                                  repeat=3),
                                on_trace_ready=trace_handler("./tb")) as prof:
        for batch in data:
            train_step(batch)
            prof.step()

Importing this module does not import torch.
"""

from __future__ import annotations

from pipeaudit.during.handler import TraceHandler, trace_handler

__all__ = ["TraceHandler", "trace_handler"]
