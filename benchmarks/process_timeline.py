"""When each process of one ``analyze`` run starts, works and ends, with its CPU time.

    python benchmarks/process_timeline.py DIR [more analyze options]

Runs ``pipeaudit analyze DIR --format json`` with a ``sitecustomize`` hook on ``PYTHONPATH``
(written to a temporary directory; nothing in the package changes) that logs, in every
Python process of the run (the CLI, the forkserver, its workers, multiprocessing's resource
tracker), the interpreter's start, the CLI's ``start_early``, each rank task and the exit,
each with the seconds since the command started and the process's CPU time. The hook costs
about 0.05 s of wall. It shows where the CPU of a 2-core run goes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

HOOK = r'''
import os, sys, time
T0 = float(os.environ.get("PA_TIMELINE_T0", "0"))
if T0:
    import atexit
    import importlib.abc
    import importlib.util

    def log(what):
        os.write(2, ("TIMELINE %.3f pid=%d cpu=%.3f %s\n"
                     % (time.time() - T0, os.getpid(), time.process_time(), what)).encode())

    log("interpreter " + " ".join(sys.argv[:2])[:40])
    atexit.register(lambda: log("exit"))

    def wrap(name, fn):
        def wrapped(*a, **k):
            log(name + " begins")
            try:
                return fn(*a, **k)
            finally:
                log(name + " ends")
        wrapped.__qualname__, wrapped.__module__ = fn.__qualname__, fn.__module__
        return wrapped

    PATCH = {"pipeaudit.prestart": "start_early", "pipeaudit.trace.load": "run_rank_task"}
    busy = set()

    class Hook(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name not in PATCH or name in busy:
                return None
            busy.add(name)
            try:
                spec = importlib.util.find_spec(name)
            finally:
                busy.discard(name)
            run = spec.loader.exec_module

            def exec_module(module, run=run, attr=PATCH[name]):
                run(module)
                setattr(module, attr, wrap(attr, getattr(module, attr)))
            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, Hook())
'''


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    with tempfile.TemporaryDirectory() as hook_dir:
        Path(hook_dir, "sitecustomize.py").write_text(HOOK)
        env = dict(os.environ, PIPEAUDIT_TIMINGS="1",
                   PYTHONPATH=os.pathsep.join([hook_dir, str(ROOT), os.environ.get("PYTHONPATH", "")]))
        env["PA_TIMELINE_T0"] = repr(time.time())
        done = subprocess.run([sys.executable, "-m", "pipeaudit", "analyze", *sys.argv[1:],
                               "--format", "json"], env=env, cwd=ROOT,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for line in done.stderr.splitlines():
        if line.startswith(("TIMELINE ", "pipeaudit timings")):
            print(line.removeprefix("TIMELINE "))
        elif line.strip():
            print("stderr:", line)
    sys.exit(done.returncode)


if __name__ == "__main__":
    main()
