"""Start the P x D x T local worker processes, watch them, fail cleanly. Torch-free.

Each rank is a multiprocessing process (``pipeaudit.harness.entry.forked_main``)
forked from a forkserver that has imported torch once (see ``entry``), in its
own session (process group), with MASTER_ADDR=127.0.0.1 and a free port. The
launcher itself never imports torch. It polls the processes and their status
files:

* all exit 0 -> the manifest rank 0 wrote is read back and returned;
* one exits non-zero or is killed -> after a short grace period (to let the
  others report) every remaining process group gets SIGTERM, then SIGKILL, and a
  HarnessError names the rank that failed first (a rank whose error is a
  communication error caused by another rank's death is not blamed);
* the whole run takes longer than ``timeout`` -> same clean-up, and the error
  names each rank's last phase (and an injected fault's note, if any).

Worker output goes to log files; on failure they are copied to
``OUT/rank{r}.log`` and the error message points there.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
import types
from pathlib import Path

from pipeaudit.errors import ConfigError, PipeauditError
from pipeaudit.harness.config import ProfileConfig, gpu_shortage
from pipeaudit.harness.entry import forked_main
from pipeaudit.harness.manifest import read_manifest
from pipeaudit.harness.status import ENV_STATUS_DIR, RankStatus

ENV_START = "PIPEAUDIT_HARNESS_START"
POLL_S = 0.05
GRACE_S = 1.5  # after the first failure, how long the others may take to report
PORT_TRIES = 3  # runs whose master port another process took first are started again
TERM_S = 10.0  # SIGTERM -> SIGKILL: time for stopped ranks to write their partial traces


class HarnessError(PipeauditError):
    """A harness run failed (a rank raised, died or hung, or the run timed out)."""

    def __init__(self, message: str, rank: int | None = None) -> None:
        super().__init__(message)
        self.rank = rank
        self.pids: list[int] = []  #: the worker pids (all reaped when this is raised)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker_env(rank: int, world: int, port: int, status_dir: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
        OMP_NUM_THREADS=env.get("OMP_NUM_THREADS", "1"),
        PYTHONUNBUFFERED="1",
    )
    env[ENV_STATUS_DIR] = status_dir
    return env


def _mp_context():
    """A forkserver that has imported torch and the worker (POSIX), else spawn.

    ``PIPEAUDIT_HARNESS_START=spawn`` forces a fresh interpreter per worker.
    """
    method = os.environ.get(ENV_START, "forkserver")
    if method not in multiprocessing.get_all_start_methods():
        method = "spawn"
    ctx = multiprocessing.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload(["pipeaudit.harness.worker"])
    return ctx


@contextlib.contextmanager
def _main_not_reimported():
    """Keep multiprocessing from re-running the caller's ``__main__`` in workers.

    multiprocessing re-imports a script ``__main__`` in every spawned/forkserver
    child, which would re-run any script (or notebook-launched file) that calls
    ``run_profile`` without an ``if __name__ == "__main__"`` guard. Workers need
    nothing from ``__main__``, so hide it while the process is being started.
    """
    real = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        if real is not None:
            sys.modules["__main__"] = real


def _kill_group(proc, sig: int) -> None:
    """Signal the worker's session (it calls setsid first thing: pgid == its pid)."""
    if proc.pid is None:
        return
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        # Still running but not yet its own group leader. (Never os.kill a worker
        # that has exited: its pid may already belong to someone else.)
        if proc.exitcode is None:
            try:
                os.kill(proc.pid, sig)
            except ProcessLookupError:
                pass
    except PermissionError:  # pragma: no cover
        pass


def _stop_all(procs: list) -> None:
    alive = [p for p in procs if p.exitcode is None]
    for p in alive:
        _kill_group(p, signal.SIGTERM)
    deadline = time.monotonic() + TERM_S
    while any(p.exitcode is None for p in alive) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    for p in procs:
        # SIGKILL the whole group even if the leader is gone: nothing it started may survive.
        _kill_group(p, signal.SIGKILL)
    for p in procs:
        p.join(timeout=TERM_S)


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


def check_backend(config: ProfileConfig) -> None:
    """A GPU run (``--backend nccl``, or ``--device cuda`` over several processes) needs one
    CUDA device per rank (per stage with ``--single-process --backend nccl``) here; a
    single-process ``--device cuda`` run needs one. Say so before starting anything.

    Imports torch (only for an explicit GPU request); ``auto`` is resolved by the
    workers themselves (nccl when they see enough devices, else gloo).
    """
    if config.backend != "nccl" and config.device != "cuda":
        return
    import torch

    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if config.single_process:
        need = config.stages if config.backend == "nccl" else 1
        if n < need:
            raise ConfigError(f"--single-process {'--backend nccl' if need > 1 else '--device cuda'}"
                              f" needs {need} CUDA device(s), found {n}")
        return
    if config.backend == "gloo":  # stages take turns on the GPUs, P2P through host memory
        if n < 1:
            raise ConfigError("--device cuda --backend gloo needs a CUDA device, found none")
        return
    if n < config.world_size:
        raise ConfigError(gpu_shortage(config.world_size, n))


OUR_OUTPUTS = ("manifest.json", "manifest.json.tmp", "rank*.json.gz", "partial-rank*.json.gz",
               "rank*.log")


def clear_previous_outputs(out: Path) -> None:
    """Remove what an earlier harness run left in ``out`` (only files we write).

    Matters with ``--force``: a stale manifest must not survive a failed run, and
    traces of ranks the new run does not have must not mix with the new ones.
    """
    for pattern in OUR_OUTPUTS:
        for path in out.glob(pattern):
            if path.is_file():
                path.unlink()


def run_profile(config: ProfileConfig) -> dict:
    """Validate ``config``, run it on ``config.world_size`` local processes, return the manifest.

    Raises ConfigError before starting anything if the configuration is invalid,
    HarnessError if the run fails or times out. A run whose master port another process
    bound first is started again on another port (up to ``PORT_TRIES`` times).
    """
    config.validate()
    check_backend(config)
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    clear_previous_outputs(out)
    for attempt in range(1, PORT_TRIES + 1):
        status_dir = tempfile.mkdtemp(prefix="pipeaudit-harness-")
        try:
            return _run(config, out, status_dir, free_port())
        except HarnessError as exc:
            if attempt == PORT_TRIES or not port_taken(exc):
                raise
            clear_previous_outputs(out)  # the failed attempt's rank logs
        finally:
            shutil.rmtree(status_dir, ignore_errors=True)
    raise AssertionError("unreachable")  # pragma: no cover


def port_taken(exc: HarnessError) -> bool:
    """Whether a run failed because its master port was taken before rank 0 listened on it
    (``free_port`` hands on a port it has closed: another process may bind it first)."""
    return "EADDRINUSE" in str(exc)


def _run(config: ProfileConfig, out: Path, status_dir: str, port: int) -> dict:
    from pipeaudit.harness.progress import Progress

    world = config.world_size
    procs: list = []
    logs: list[Path] = []
    statuses = [RankStatus(r) for r in range(world)]
    total_steps = config.warmup_steps + config.steps
    progress = Progress(total_steps, config.progress)
    started = time.monotonic()
    deadline = started + config.timeout
    try:
        ctx = _mp_context()
        cfg = config.to_dict()
        for r in range(world):
            log = Path(status_dir) / f"rank{r}.log"
            log.touch()
            logs.append(log)
            proc = ctx.Process(
                target=forked_main, name=f"pipeaudit-rank{r}",
                args=(cfg, _worker_env(r, world, port, status_dir), str(log)),
            )
            with _main_not_reimported():
                proc.start()
            procs.append(proc)
        first_fail: dict[int, float] = {}
        while True:
            now = time.monotonic()
            for st in statuses:
                st.refresh(status_dir)
            progress.update(min(st.steps_done for st in statuses))
            codes = [p.exitcode for p in procs]
            for r, c in enumerate(codes):
                if c not in (None, 0) and r not in first_fail:
                    first_fail[r] = now
            if first_fail:
                t0 = min(first_fail.values())
                if all(c is not None for c in codes) or now - t0 > GRACE_S:
                    break
            elif all(c == 0 for c in codes):
                break
            if now > deadline:
                break
            time.sleep(POLL_S)
    except BaseException:  # KeyboardInterrupt included: never leave workers behind
        progress.close()
        _stop_all(procs)
        raise
    progress.close()
    codes = [p.exitcode for p in procs]
    _stop_all(procs)
    for st in statuses:
        st.refresh(status_dir)

    if all(c == 0 for c in codes):
        try:
            return read_manifest(out)
        except (OSError, ValueError) as exc:
            raise HarnessError(f"{out}: all ranks finished but the manifest is unreadable: {exc}")

    # Failure: keep the logs next to the traces and name the culprit.
    for r, log in enumerate(logs):
        if log.exists():
            shutil.copyfile(log, out / f"rank{r}.log")
    err = (_failure_error(config, statuses, codes, first_fail, out) if first_fail
           else _timeout_error(config, statuses, out))
    err.pids = [p.pid for p in procs]
    raise err


def _where(st: RankStatus) -> str:
    return st.phase


def _failure_error(config, statuses, codes, first_fail, out) -> HarnessError:
    def blame_key(r: int):
        err = statuses[r].error
        secondary = err is not None and err.get("comm", False)
        return (secondary, first_fail[r], r)

    culprit = min(first_fail, key=blame_key)
    st = statuses[culprit]
    if st.error is not None:
        what = f"failed during {_where(st)}: {st.error.get('message', '?')}"
    else:
        what = f"{_exit_text(codes[culprit])} during {_where(st)}"
    notes = f" [{'; '.join(st.notes)}]" if st.notes else ""
    others = sorted(r for r in first_fail if r != culprit)
    also = f"; rank(s) {', '.join(map(str, others))} failed after it" if others else ""
    return HarnessError(
        f"rank {culprit} {what}{notes}{also} (worker logs: {out}/rank*.log)", rank=culprit
    )


def _timeout_error(config, statuses, out) -> HarnessError:
    noted = [st for st in statuses if st.notes]
    where = ", ".join(f"rank {st.rank}: {_where(st)}" for st in statuses)
    if noted:
        culprit = noted[0]
        head = f"rank {culprit.rank} hung ({'; '.join(culprit.notes)})"
        rank = culprit.rank
    else:
        least = min(statuses, key=lambda s: (s.steps_done, s.rank))
        head = f"no progress; rank {least.rank} is furthest behind"
        rank = least.rank
    return HarnessError(
        f"run timed out after {config.timeout:g} s: {head}; last seen {where} "
        f"(worker logs: {out}/rank*.log)", rank=rank,
    )
