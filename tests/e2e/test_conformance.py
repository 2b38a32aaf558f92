"""The conformance matrix's CI slice: real torch, DeepSpeed and Megatron-core runs, each read
without its per-action spans and held to its annotated twin (docs/conformance.md). The whole
grid is ``python benchmarks/conformance.py --all``."""

from __future__ import annotations

import pytest

from pipeaudit.conformance.cells import CI_SLICE
from pipeaudit.conformance.matrix import make_run, read_cell

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return tmp_path_factory.mktemp("conformance")


@pytest.mark.parametrize("cell", CI_SLICE, ids=[c.name for c in CI_SLICE])
def test_unannotated_reading_equals_its_twin(cell, runs):
    if cell.framework == "deepspeed":
        pytest.importorskip("deepspeed")
    if cell.framework == "megatron":
        pytest.importorskip("megatron.core")
    row = read_cell(cell, make_run(cell, runs), runs / "_bare")
    assert row.verdict.ok, f"{cell.name}: {row.read_as}: " + "; ".join(row.verdict.problems)
    if row.stripped and cell.reading == "all":
        assert row.verdict.coverage is None or row.verdict.coverage > 0.5
