"""Scalars to MLflow: logged to the training's active run by id, from the audit's process (the
tracking URI and run id are handed over when the window is exported)."""

from __future__ import annotations

import time

from pipeaudit.during.scalars import tagged


def active_run() -> tuple[str, str] | None:
    """(tracking URI, run id) of MLflow's active run in this process, when the training
    imported mlflow and started a run; None otherwise (mlflow is never imported here)."""
    import sys

    mlflow = sys.modules.get("mlflow")
    if mlflow is None:
        return None
    run = mlflow.active_run()
    if run is None:
        return None
    return str(mlflow.get_tracking_uri()), run.info.run_id


def log_mlflow(tracking_uri: str, run_id: str, scalars: dict[str, float], step: int) -> None:
    """Log ``scalars`` at ``step`` to run ``run_id``."""
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    now = int(time.time() * 1000)
    metrics = [Metric(key=k, value=float(v), timestamp=now, step=int(step))
               for k, v in tagged(scalars).items()]
    MlflowClient(tracking_uri=tracking_uri).log_batch(run_id, metrics=metrics)
