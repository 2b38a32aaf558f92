"""The post-mortem notebooks run top to bottom on the bundled sample traces (nbclient), and are
committed without outputs.

The kernel is the Python running the tests: a kernelspec pointing at ``sys.executable`` is
written to a temporary directory put first on JUPYTER_PATH, so no ``ipykernel install`` step
is needed anywhere.
"""

from __future__ import annotations

import json
import os
import sys

import pytest
from tests.support.paths import REPO

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
KERNEL = "pipeaudit-test-python"


def test_there_are_post_mortem_notebooks():
    names = {p.name for p in NOTEBOOKS}
    assert {"why_is_my_bubble_above_theory.ipynb", "compare_schedules.ipynb"} <= names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_committed_without_outputs(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code, "a notebook without code cells"
    for i, cell in enumerate(code):
        assert cell.get("outputs") == [], f"{path.name}: code cell {i} has outputs committed"
        assert cell.get("execution_count") is None, f"{path.name}: code cell {i} has an execution count"


@pytest.fixture
def kernel_name(tmp_path, monkeypatch):
    spec = tmp_path / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "pipeaudit tests", "language": "python",
    }))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path) + os.pathsep + os.environ.get("JUPYTER_PATH", ""))
    # the kernel imports the pipeaudit of this checkout, whatever is installed
    monkeypatch.setenv("PYTHONPATH", str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the kernel picks its inline backend
    return KERNEL


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_executes(path, kernel_name):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, kernel_name=kernel_name, timeout=300,
                                     resources={"metadata": {"path": str(REPO / "notebooks")}})
    client.execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors
    # the figures really rendered
    images = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if "image/png" in o.get("data", {})]
    assert images, f"{path.name} displayed no figure"
