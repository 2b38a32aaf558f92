"""Entry point of a launcher-spawned worker: ``python -m pipeaudit.harness.entry CONFIG.json``.

Torch-free on purpose: the first thing a worker does is tie its life to the
launcher's (so a SIGKILLed launcher leaves nothing behind, even while a worker
is still importing torch, which takes seconds); only then does it import the
torch worker. Environment: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``, the status directory and
the launcher's pid (set by ``pipeaudit.harness.launcher``).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

ENV_LAUNCHER_PID = "PIPEAUDIT_HARNESS_LAUNCHER_PID"
_COMM_MARKERS = ("gloo", "nccl", "connection", "broken pipe", "timed out", "timeout",
                 "peer", "socket", "distbackenderror", "closed")


def exit_with_parent(parent: int) -> None:
    """Die with the launcher: if it is SIGKILLed, orphaned workers must not linger.

    On Linux the kernel does it (``prctl(PR_SET_PDEATHSIG, SIGKILL)``), which works
    even while the main thread blocks in gloo holding the GIL; elsewhere a daemon
    thread polls the parent pid.
    """
    import signal

    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(1, int(signal.SIGKILL), 0, 0, 0) == 0:  # 1 == PR_SET_PDEATHSIG
            if os.getppid() != parent:  # the launcher died before prctl took effect
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


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if ENV_LAUNCHER_PID in os.environ:
        exit_with_parent(int(os.environ[ENV_LAUNCHER_PID]))
    from pipeaudit.harness.config import ProfileConfig
    from pipeaudit.harness.status import ENV_STATUS_DIR, Reporter

    config = ProfileConfig.from_dict(json.loads(Path(argv[0]).read_text()))
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    status_dir = os.environ.get(ENV_STATUS_DIR)
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


if __name__ == "__main__":
    main()
