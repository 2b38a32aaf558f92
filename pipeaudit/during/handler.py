"""``trace_handler``: torch's ``tensorboard_trace_handler``, plus an audit of every window.

Each call (the profiler's ``on_trace_ready``, once per window and rank) writes the trace exactly
as torch does (``{dir_name}/{worker}.{time_ns}.pt.trace.json[.gz]``, worker default
``{hostname}_{pid}``), then this rank's index entry (:mod:`.index`). On the auditing rank (rank 0
by default) it also queues the window (:mod:`.queue`) and, when none runs, starts the folder's
audit worker (:mod:`.worker`): a detached, low-priority process that audits the queued windows
one at a time and exits when none is left, at the latest ``audit_bound_s`` after the newest
window. The training process runs no collective and never waits for an audit; at exit it
says, in one line on stderr, where the results of the windows not yet audited will land.
Errors of the audit path are logged (``logging`` name ``pipeaudit.profiler``), never raised.
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
from typing import IO, Iterable

from pipeaudit.during.index import AUDIT_FILE, INDEX_DIR, LOG_FILE, window_folder, write_entry
from pipeaudit.during.queue import enqueue, process_start, try_lock, worker_pid, write_pid
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


def _training_pids() -> list[int]:
    """The processes the audit yields to while any runs: this one and, under torchrun (or any
    torchelastic agent), the launcher, which returns once every rank of the node has exited."""
    pids = [os.getpid()]
    if os.environ.get("TORCHELASTIC_RUN_ID") is not None and os.getppid() > 1:
        pids.append(os.getppid())
    return pids


class TraceHandler:
    """The callable ``on_trace_ready`` of :func:`trace_handler` (see there)."""

    def __init__(self, dir_name: str, worker_name: str | None = None, use_gzip: bool = False,
                 *, audit: bool = True, log_to: Iterable[str] = BACKENDS,
                 gate: str | os.PathLike | None = None, audit_rank: int = 0,
                 rank_timeout_s: float = 60.0, audit_bound_s: float = 120.0,
                 low_priority: bool = True) -> None:
        unknown = sorted(set(log_to) - set(BACKENDS))
        if unknown:
            raise ValueError(f"log_to: unknown backend(s) {', '.join(unknown)} "
                             f"(known: {', '.join(BACKENDS)})")
        if audit_bound_s < 0:
            raise ValueError("audit_bound_s: must be >= 0")
        self.dir_name = dir_name
        self.worker_name = worker_name
        self.use_gzip = use_gzip
        self.audit = audit
        self.log_to = tuple(log_to)
        self.gate = str(gate) if gate is not None else None
        self.audit_rank = audit_rank
        self.rank_timeout_s = rank_timeout_s
        self.audit_bound_s = audit_bound_s
        self.low_priority = low_priority
        #: (step, folder) of the windows queued and not yet picked up, in order
        self.pending: list[tuple[int, Path]] = []
        #: the audit.json documents of the finished windows, in order
        self.audits: list[dict] = []
        #: the audit workers this process started (reaped as they end)
        self.workers: list[subprocess.Popen] = []
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
        from pipeaudit.during.sinks.mlflow import active_run

        enqueue(folder, {"step": step, "world_size": world, "queued_at": time.time(),
                         "bound_s": self.audit_bound_s, "rank_timeout_s": self.rank_timeout_s,
                         "log_to": list(self.log_to), "tensorboard_dir": self.dir_name,
                         "gate": self.gate,
                         "mlflow": active_run() if "mlflow" in self.log_to else None,
                         "training": [[p, process_start(p)] for p in _training_pids()]})
        self.pending.append((step, folder))
        lock = try_lock(self.root)
        if lock is not None:  # no worker: start one, the lock handed over
            with lock:
                self.workers.append(self._launch(lock))
        if not self._atexit:
            import atexit

            atexit.register(self._at_exit)
            self._atexit = True

    @property
    def root(self) -> Path:
        """The window index: ``{dir_name}/pipeaudit``."""
        return Path(self.dir_name) / INDEX_DIR

    def _launch(self, lock: IO[str]) -> subprocess.Popen:
        """Start the folder's audit worker, detached: a session of its own, no terminal, no
        pipe of the training's, so it neither holds the job up nor dies with it. It inherits
        ``lock`` (the folder's worker lock, held)."""
        env = dict(os.environ)
        package_root = str(Path(__file__).resolve().parents[2])
        if package_root in sys.path and not package_root.endswith("-packages"):
            # a checkout on this process's path: the audit imports the same pipeaudit
            env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH"))
                                                if p)
        # one thread each: the audit shares the machine with the training
        env.update(POLARS_MAX_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
                   OPENBLAS_NUM_THREADS="1")
        spec = {"root": str(self.root), "low_priority": self.low_priority,
                "lock_fd": lock.fileno()}
        with open(self.root / "worker.log", "ab") as errlog:
            proc = subprocess.Popen([sys.executable, "-m", "pipeaudit.during.worker",
                                     json.dumps(spec)], stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=errlog, env=env,
                                    close_fds=True, pass_fds=(lock.fileno(),),
                                    start_new_session=True)
        write_pid(lock, proc.pid)
        return proc

    def collect(self) -> list[dict]:
        """Pick up the windows audited since the last call (their audit.json), in window
        order, log them to W&B's active run and report notes, skips and regressions; returns
        their documents. Never waits."""
        done = []
        while self.pending and (self.pending[0][1] / AUDIT_FILE).exists():  # in window order
            step, folder = self.pending.pop(0)
            doc = self._read(folder)
            if doc is not None:
                done.append(doc)
                self._report(step, doc)
        self.workers = [w for w in self.workers if w.poll() is None]  # reap the ended ones
        self.audits += done
        return done

    def wait(self, timeout: float | None = None) -> list[dict]:
        """Wait (at most ``timeout`` s; None: until the worker has written every window) for
        the windows queued so far; returns the documents of every finished window. Only on
        request: the training never calls it."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.pending:
            self.collect()
            if not self.pending or (deadline is not None and time.monotonic() >= deadline):
                break
            time.sleep(0.1)
        return self.audits

    def _at_exit(self) -> None:
        """One line on stderr: where the windows not yet audited will land. No wait."""
        try:
            self.collect()
            if self.pending:
                sys.stderr.write(self.exit_line() + "\n")
                sys.stderr.flush()
        except Exception as exc:  # pragma: no cover - interpreter shutting down
            log.warning("pipeaudit: %s", exc)

    def exit_line(self) -> str:
        """``pipeaudit: 2 window(s) not audited yet (step 8, step 12): ...``."""
        pid = worker_pid(self.root)
        steps = ", ".join(f"step {s}" for s, _ in self.pending)
        where = self.pending[0][1] / AUDIT_FILE if len(self.pending) == 1 else \
            self.root / "step_N" / AUDIT_FILE
        return (f"pipeaudit: {len(self.pending)} window(s) not audited yet ({steps}): the "
                f"background audit{f' (pid {pid})' if pid else ''} writes {where}, or a skip "
                f"with its reason, within {self.audit_bound_s:g} s")

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
        if doc.get("kind") == "window-skipped":
            log.warning("pipeaudit: window at step %d skipped: %s", step, doc.get("skipped"))
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
                  rank_timeout_s: float = 60.0, audit_bound_s: float = 120.0,
                  low_priority: bool = True) -> TraceHandler:
    """A drop-in for ``torch.profiler.tensorboard_trace_handler`` that audits every window.

    The traces are written as torch writes them (same folder, same names), so TensorBoard's
    profiler view reads them. Rank ``audit_rank`` queues each window for the folder's audit
    worker, a detached low-priority process (one at a time per folder), which waits for every
    rank's file (at most ``rank_timeout_s`` after the window; then it audits the ranks that
    arrived and says so), writes ``{dir_name}/pipeaudit/step_{N}/audit.json`` and logs bubble,
    theory, replay ideal, exposed communication, stage imbalance, step time and per-stage
    compute to each backend of ``log_to`` that is there: TensorBoard (an event file in
    ``dir_name``), MLflow's and W&B's active run. ``gate``: a baseline file (``pipeaudit
    baseline``) each window is gated against; regressions are logged and written into
    audit.json. ``audit=False``: torch's handler exactly.

    The training never waits for an audit. While it runs, an audit starts once the host leaves
    a core idle (at once on a GPU node); after it, at once. The worker is gone at the latest
    ``audit_bound_s`` after the newest window: a window not audited by then gets an
    ``audit.json`` of kind ``window-skipped`` with the reason. ``low_priority=False``: the
    audits run at once and at normal priority. :meth:`TraceHandler.wait` waits on request.
    """
    return TraceHandler(dir_name, worker_name, use_gzip, audit=audit, log_to=log_to, gate=gate,
                        audit_rank=audit_rank, rank_timeout_s=rank_timeout_s,
                        audit_bound_s=audit_bound_s, low_priority=low_priority)
