"""Entry point of a launcher-started worker process (``forked_main``). Torch-free.

The launcher starts workers with multiprocessing: by default from a forkserver
that has already imported torch and the worker (importing
``torch.distributed.pipelining`` costs ~4 s of CPU per process; a forkserver
pays it once per launcher process, which matters for P ranks on few cores, for
test suites and for sweeps). The environment each worker needs (``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``,
``MASTER_PORT``, the status directory, any fault injection) is passed
explicitly, since the forkserver's own environment is that of its first use.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

_COMM_MARKERS = ("gloo", "nccl", "connection", "broken pipe", "timed out", "timeout",
                 "peer", "socket", "distbackenderror", "closed")


def exit_with_parent(parent: int) -> None:
    """Die with the parent (the forkserver, which dies with the launcher, or the
    launcher itself): if the launcher is SIGKILLed, workers must not linger.

    On Linux the kernel does it (``prctl(PR_SET_PDEATHSIG, SIGKILL)``), which works
    even while the main thread blocks in gloo holding the GIL; elsewhere a daemon
    thread polls the parent pid.
    """
    import signal

    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(1, int(signal.SIGKILL), 0, 0, 0) == 0:  # 1 == PR_SET_PDEATHSIG
            if os.getppid() != parent:  # the parent died before prctl took effect
                os._exit(3)
            return
    except (OSError, AttributeError):
        pass
    import threading

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(3)

    threading.Thread(target=watch, name="pipeaudit-parent-watch", daemon=True).start()


def describe_error(exc: BaseException) -> dict:
    """Summary of an exception for the launcher: type, first line, comm-or-not.

    ``comm`` marks errors that are most likely a consequence of another rank's
    failure (connection closed, timeouts), so the launcher blames someone else.
    """
    import traceback

    root = exc  # unwrap torch's "failed to run forward" wrappers to the root cause
    while root.__cause__ is not None:
        root = root.__cause__
    text = f"{type(root).__name__}: {str(root).strip()}"
    first = text.splitlines()[0][:300] if text else type(root).__name__
    low = (type(exc).__name__ + " " + str(exc) + " " + text).lower()
    comm = any(m in low for m in _COMM_MARKERS) and "injected fault" not in low
    return {"type": type(root).__name__, "message": first, "comm": comm,
            "traceback": "".join(traceback.format_exception(exc))[-4000:]}


def release_forkserver() -> None:
    """Drop this process's reference to the forkserver's "alive" pipe.

    multiprocessing hands every forkserver child the write end of that pipe (so
    children could start processes themselves); the forkserver only exits once
    every write end is closed. A worker holding it would keep the forkserver
    alive after the launcher died, and the forkserver would keep the worker
    alive (PDEATHSIG): release it.
    """
    try:
        from multiprocessing import forkserver

        server = forkserver._forkserver
        fd = getattr(server, "_forkserver_alive_fd", None)
        if fd is not None:
            os.close(fd)
            server._forkserver_alive_fd = None
    except (ImportError, AttributeError, OSError):  # pragma: no cover - other Pythons
        pass


def use_run_tempdir(status_dir: str | None) -> None:
    """Point this rank's temporary files into the launcher's status folder, removed with it.

    A rank ends with ``os._exit``, which skips the interpreter's clean-up of temporary
    folders that libraries make when imported (Megatron-core imports wandb, which makes two
    per process): in the machine's temporary folder they would stay after every run.
    """
    if not status_dir:
        return
    path = tempfile.mkdtemp(prefix="tmp-", dir=status_dir)
    os.environ["TMPDIR"] = path
    tempfile.tempdir = path


def forked_main(config_dict: dict, env: dict[str, str], log_path: str) -> None:
    """Body of one worker process (multiprocessing target, forkserver or spawn).

    Order matters: own session (the launcher kills the whole group), die with
    the parent, send output to the log file, take the launcher's environment,
    and only then import the torch worker (already imported when forked from the
    preloaded forkserver).
    """
    os.setsid()
    release_forkserver()
    exit_with_parent(os.getppid())
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    os.environ.clear()
    os.environ.update(env)

    from pipeaudit.harness.config import ProfileConfig
    from pipeaudit.harness.status import ENV_STATUS_DIR, Reporter

    use_run_tempdir(env.get(ENV_STATUS_DIR))

    config = ProfileConfig.from_dict(config_dict)
    rank = int(env["RANK"])
    world = int(env["WORLD_SIZE"])
    local_rank = int(env.get("LOCAL_RANK", rank))
    local_world = int(env.get("LOCAL_WORLD_SIZE", world))
    status_dir = env.get(ENV_STATUS_DIR)
    rep = Reporter(status_dir, rank)
    try:
        rep.phase("import")
        from pipeaudit.harness.worker import run_rank

        run_rank(config, rank, world, local_rank, local_world, "local", status_dir)
    except BaseException as exc:  # noqa: BLE001 - report anything, then die
        info = describe_error(exc)
        rep.error(**info)
        sys.stderr.write(info["traceback"])
        sys.stderr.flush()
        os._exit(1)
    sys.stdout.flush()
    sys.stderr.flush()
    # os._exit: skip interpreter teardown, where gloo/profiler threads can hang.
    os._exit(0)
