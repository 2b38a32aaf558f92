"""Where a window's scalars go, one module per backend: :mod:`.tensorboard` (an event file
beside the traces), :mod:`.mlflow` (the training's active run, from the audit's process) and
:mod:`.wandb` (the training's active run, from the training process)."""

from __future__ import annotations

#: The backends ``trace_handler(log_to=...)`` knows.
BACKENDS = ("tensorboard", "wandb", "mlflow")
