"""Shared fixtures. Paths and the CLI runner are plain imports, usable at collection time too:

    from tests.support.paths import REPO, SAMPLES, DATA, HTA
    from tests.support.cli import invoke

``tests`` is a package (``__init__.py`` in every directory), so pytest puts the repository root
on ``sys.path`` and test files of the same name may live in different layers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest
from click.testing import Result

from tests.support import paths
from tests.support.cli import invoke as _invoke


@pytest.fixture
def samples() -> Path:
    """The bundled real harness traces (``sample_traces/``)."""
    return paths.SAMPLES


@pytest.fixture
def invoke() -> Callable[..., Result]:
    """``invoke("analyze", run, "--format", "json")``: a pipeaudit command in click's runner."""
    return _invoke
