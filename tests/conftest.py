"""Shared test configuration. Paths and the CLI runner are plain imports, so that module-level
``parametrize`` lists can use them at collection time:

    from tests.support.paths import REPO, SAMPLES, DATA, TORCH_CPU, DOCS, SHARED_TRACES, HTA
    from tests.support.cli import invoke     # invoke("analyze", run, "--format", "json")

``tests`` is a package (``__init__.py`` in every directory), so pytest puts the repository root
on ``sys.path`` and test files may share a name in different directories.

The suite runs on pytest-xdist's workers, a test file per worker at a time (``-n auto --dist
loadfile``, the README's command); tests marked ``exclusive`` run alone
(tests/support/parallel.py).
"""

import os
from pathlib import Path

import pytest
from hypothesis import settings

# Property-based tests draw the same examples on every run ("ci": a red CI is a change's, never
# the draw's); HYPOTHESIS_PROFILE=explore draws new ones each run, to look for failures.
settings.register_profile("ci", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

pytest_plugins = ["tests.support.parallel", "tests.support.tracegen.pytest_tally"]


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    """A folder for one test module's files, in pytest's temporary tree (for hypothesis tests,
    which cannot take the function-scoped ``tmp_path``)."""
    return tmp_path_factory.mktemp("scratch")
