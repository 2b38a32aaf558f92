"""Code run in a fresh interpreter: what a test must see without the modules pytest loaded."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support.paths import REPO


def run_python(code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """``python -c CODE ARGS...`` in the repository, this checkout's ``pipeaudit`` first on
    the path; text output captured."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, capture_output=True,
                          text=True, env=env, timeout=timeout)
