"""Code run in a fresh interpreter: what a test must see without the modules pytest loaded."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support.paths import REPO


def repo_env(**extra: str) -> dict[str, str]:
    """This process's environment with this checkout first on ``PYTHONPATH`` (what was there
    kept after it), plus ``extra``."""
    env = dict(os.environ)
    old = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = str(REPO) + os.pathsep + old if old else str(REPO)
    env.update(extra)
    return env


def run_python(code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """``python -c CODE ARGS...`` in the repository, this checkout's ``pipeaudit`` first on
    the path; text output captured."""
    return subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, capture_output=True,
                          text=True, env=repo_env(), timeout=timeout)
