"""Where a window's scalars go, one module per backend: :mod:`.tensorboard` (an event file
beside the traces), :mod:`.mlflow` (the training's active run, from the audit's process) and
:mod:`.wandb` (the training's active run, from the training process)."""

from __future__ import annotations

#: The backends ``trace_handler(log_to=...)`` knows.
BACKENDS = ("tensorboard", "wandb", "mlflow")


def log_from_audit(spec: dict, result, step: int) -> None:
    """The audit process's part: TensorBoard and MLflow, as ``spec`` (the window's queue entry)
    asks; each failure is a note in ``result`` (a :class:`~pipeaudit.during.audit_window.
    WindowAudit`), never raised."""
    if not result.scalars:
        return
    logged = result.doc.setdefault("logged_to", [])
    log_to = spec.get("log_to") or ()
    if "tensorboard" in log_to and spec.get("tensorboard_dir"):
        try:
            from pipeaudit.during.sinks.tensorboard import log_tensorboard

            path = log_tensorboard(spec["tensorboard_dir"], result.scalars, step)
            logged.append({"backend": "tensorboard", "file": path})
        except Exception as exc:
            result.notes.append(f"logging to tensorboard failed: {type(exc).__name__}: {exc}")
    if "mlflow" in log_to and spec.get("mlflow"):
        try:
            from pipeaudit.during.sinks.mlflow import log_mlflow

            uri, run_id = spec["mlflow"]
            log_mlflow(uri, run_id, result.scalars, step)
            logged.append({"backend": "mlflow", "run_id": run_id})
        except Exception as exc:
            result.notes.append(f"logging to mlflow failed: {type(exc).__name__}: {exc}")
