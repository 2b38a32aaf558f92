"""``trace_handler``: torch's ``tensorboard_trace_handler``, plus an audit of every window.

Each call (the profiler's ``on_trace_ready``, once per window and rank) writes the trace exactly
as torch does (``{dir_name}/{worker}.{time_ns}.pt.trace.json[.gz]``, worker default
``{hostname}_{pid}``), then this rank's index entry (:mod:`.index`). On the auditing rank (rank 0
by default) it also starts :mod:`.worker` as a subprocess at the lowest priority: that process
waits for every rank's entry of the window, audits the files, writes ``audit.json`` and logs
the scalars. The training process runs no collective and waits for nothing; errors of the
audit path are logged (``logging`` name ``pipeaudit.profiler``), never raised.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterable

from pipeaudit.during.index import AUDIT_FILE, LOG_FILE, window_folder, write_entry
from pipeaudit.during.sinks import BACKENDS

log = logging.getLogger("pipeaudit.profiler")


def _rank_and_world() -> tuple[int, int]:
    """This process's rank and the world size: torch.distributed when initialised, else the
    launcher's RANK / WORLD_SIZE, else rank 0 of 1 (one process)."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except Exception:  # pragma: no cover - a half-initialised backend
        pass
    ws = os.environ.get("WORLD_SIZE")
    return int(os.environ.get("RANK", "0")), (int(ws) if ws else 1)


class TraceHandler:
    """The callable ``on_trace_ready`` of :func:`trace_handler` (see there)."""

    def __init__(self, dir_name: str, worker_name: str | None = None, use_gzip: bool = False,
                 *, audit: bool = True, log_to: Iterable[str] = BACKENDS,
                 gate: str | os.PathLike | None = None, audit_rank: int = 0,
                 rank_timeout_s: float = 300.0, exit_wait_s: float = 60.0,
                 low_priority: bool = True, idle_wait_s: float = 3600.0) -> None:
        unknown = sorted(set(log_to) - set(BACKENDS))
        if unknown:
            raise ValueError(f"log_to: unknown backend(s) {', '.join(unknown)} "
                             f"(known: {', '.join(BACKENDS)})")
        self.dir_name = dir_name
        self.worker_name = worker_name
        self.use_gzip = use_gzip
        self.audit = audit
        self.log_to = tuple(log_to)
        self.gate = str(gate) if gate is not None else None
        self.audit_rank = audit_rank
        self.rank_timeout_s = rank_timeout_s
        self.exit_wait_s = exit_wait_s
        self.low_priority = low_priority
        self.idle_wait_s = idle_wait_s
        #: (step, folder, process) of the audits started and not yet picked up
        self.pending: list[tuple[int, Path, subprocess.Popen]] = []
        #: the audit.json documents of the finished windows, in order
        self.audits: list[dict] = []
        self._atexit = False

    # ---- torch's part, unchanged

    def _export(self, prof) -> str:
        if not os.path.isdir(self.dir_name):
            try:
                os.makedirs(self.dir_name, exist_ok=True)
            except Exception as e:
                raise RuntimeError("Can't create directory: " + self.dir_name) from e
        if not self.worker_name:
            self.worker_name = f"{socket.gethostname()}_{os.getpid()}"
        file_name = f"{self.worker_name}.{time.time_ns()}.pt.trace.json"
        if self.use_gzip:
            file_name = file_name + ".gz"
        prof.export_chrome_trace(os.path.join(self.dir_name, file_name))
        return file_name

    def __call__(self, prof) -> None:
        file_name = self._export(prof)
        if not self.audit:
            return
        try:
            self._after_export(prof, file_name)
        except Exception as exc:  # the audit path never stops the training
            log.warning("pipeaudit: window not audited: %s: %s", type(exc).__name__, exc)

    # ---- the audit path

    def _after_export(self, prof, file_name: str) -> None:
        rank, world = _rank_and_world()
        step = int(getattr(prof, "step_num", 0))
        folder = window_folder(self.dir_name, step)
        write_entry(folder, rank, world, file_name, step)
        if rank != self.audit_rank:
            return
        self.collect()
        self.pending.append((step, folder, self._launch(folder, step, world)))
        if not self._atexit:
            import atexit

            atexit.register(self._at_exit)
            self._atexit = True

    def _launch(self, folder: Path, step: int, world: int | None) -> subprocess.Popen:
        from pipeaudit.during.sinks.mlflow import active_run

        spec = {"folder": str(folder), "step": step, "world_size": world,
                "rank_timeout_s": self.rank_timeout_s, "log_to": list(self.log_to),
                "tensorboard_dir": self.dir_name, "gate": self.gate,
                "mlflow": active_run() if "mlflow" in self.log_to else None,
                "low_priority": self.low_priority,
                "idle_wait_s": self.idle_wait_s if self.low_priority else 0}
        env = dict(os.environ)
        package_root = str(Path(__file__).resolve().parents[2])
        if package_root in sys.path and not package_root.endswith("-packages"):
            # a checkout on this process's path: the audit imports the same pipeaudit
            env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH"))
                                                if p)
        # one thread each: the audit shares the machine with the training
        env.update(POLARS_MAX_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
                   OPENBLAS_NUM_THREADS="1")
        with open(folder / LOG_FILE, "ab") as errlog:
            return subprocess.Popen([sys.executable, "-m", "pipeaudit.during.worker",
                                     json.dumps(spec)], stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=errlog, env=env,
                                    close_fds=True, start_new_session=True)

    def collect(self) -> list[dict]:
        """Pick up the audits that finished since the last call (their audit.json), in window
        order, log them to W&B's active run and report notes and regressions; returns their
        documents."""
        done = []
        while self.pending and self.pending[0][2].poll() is not None:  # in window order
            step, folder, _ = self.pending.pop(0)
            doc = self._read(folder)
            if doc is not None:
                done.append(doc)
                self._report(step, doc)
        for _, _, proc in self.pending:
            proc.poll()  # reap the finished ones
        self.audits += done
        return done

    def wait(self, timeout: float | None = None) -> list[dict]:
        """Wait (at most ``timeout`` s; None: for ever) for the audits started so far; returns
        the documents of every finished window."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.pending:
            self.collect()
            if not self.pending or (deadline is not None and time.monotonic() >= deadline):
                break
            time.sleep(0.1)
        return self.audits

    def _at_exit(self) -> None:
        try:
            if self.pending:
                self.wait(self.exit_wait_s)
        except Exception as exc:  # pragma: no cover - interpreter shutting down
            log.warning("pipeaudit: %s", exc)

    @staticmethod
    def _read(folder: Path) -> dict | None:
        try:
            return json.loads((folder / AUDIT_FILE).read_text())
        except (OSError, ValueError) as exc:
            log.warning("pipeaudit: %s: no audit (%s); see %s", folder, exc, folder / LOG_FILE)
            return None

    def _report(self, step: int, doc: dict) -> None:
        if doc.get("error"):
            log.warning("pipeaudit: window at step %d: %s", step, doc["error"])
            return
        for note in doc.get("notes") or []:
            log.warning("pipeaudit: window at step %d: %s", step, note)
        gate = doc.get("gate") or {}
        for check in gate.get("checks") or []:
            if check.get("verdict") == "fail":
                log.warning("pipeaudit: window at step %d regressed: %s", step,
                            check.get("explanation"))
        if "wandb" in self.log_to and doc.get("scalars"):
            from pipeaudit.during.sinks.wandb import active_run, log_wandb

            run = active_run()
            if run is not None:
                try:
                    log_wandb(run, doc["scalars"], step)
                except Exception as exc:
                    log.warning("pipeaudit: logging to wandb failed: %s: %s",
                                type(exc).__name__, exc)


def trace_handler(dir_name: str, worker_name: str | None = None, use_gzip: bool = False, *,
                  audit: bool = True, log_to: Iterable[str] = BACKENDS,
                  gate: str | os.PathLike | None = None, audit_rank: int = 0,
                  rank_timeout_s: float = 300.0, exit_wait_s: float = 60.0,
                  low_priority: bool = True, idle_wait_s: float = 3600.0) -> TraceHandler:
    """A drop-in for ``torch.profiler.tensorboard_trace_handler`` that audits every window.

    The traces are written as torch writes them (same folder, same names), so TensorBoard's
    profiler view reads them. Per window, rank ``audit_rank`` starts a low-priority
    subprocess that waits for every rank's file (at most ``rank_timeout_s``; then it audits
    the ranks that arrived and says so), writes ``{dir_name}/pipeaudit/step_{N}/audit.json``
    and logs bubble, theory, replay ideal, exposed communication, stage imbalance, step time
    and per-stage compute to each backend of ``log_to`` that is there: TensorBoard (an event
    file in ``dir_name``), MLflow's and W&B's active run. ``gate``: a baseline file
    (``pipeaudit baseline``) each window is gated against; regressions are logged and written
    into audit.json. ``audit=False``: torch's handler exactly. At exit the auditing rank waits
    up to ``exit_wait_s`` for audits still running (:meth:`TraceHandler.wait` waits at will).
    The audit starts once the host leaves a core idle (at once on a GPU node; where the
    training keeps every core busy, often when it ends), waiting at most ``idle_wait_s``.
    ``low_priority=False``: the audit runs at once and at normal priority.
    """
    return TraceHandler(dir_name, worker_name, use_gzip, audit=audit, log_to=log_to, gate=gate,
                        audit_rank=audit_rank, rank_timeout_s=rank_timeout_s,
                        exit_wait_s=exit_wait_s, low_priority=low_priority,
                        idle_wait_s=idle_wait_s)
