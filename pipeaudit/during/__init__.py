"""Audit during training: every profiled window audited as it lands, its numbers logged where
users already look (TensorBoard, W&B, MLflow).

* :func:`pipeaudit.profiler.trace_handler` (:mod:`.handler`): a drop-in for
  ``torch.profiler.tensorboard_trace_handler`` that also queues each window (:mod:`.queue`)
  for the folder's detached audit worker (:mod:`.worker`), which audits them one at a time,
  each in a low-priority process (:mod:`.auditor`, :mod:`.priority`), and writes ``audit.json``
  (:mod:`.audit_window`), or a skip with its reason (:mod:`.skips`) past its bound;
* :mod:`pipeaudit.trace.windows`: finds the windows in a folder of traces as they land
  (``pipeaudit watch``, :mod:`.watch`; every command reads them too);
* :mod:`.scalars`: the numbers logged per window; :mod:`.sinks`: one module per backend.

Nothing here imports torch at import time.
"""

from __future__ import annotations

__all__: list[str] = []
