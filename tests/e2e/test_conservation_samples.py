"""Compute conservation on every bundled real run read from its ops: each compute op of the
schedule's thread lies in an action or in a named category (docs/metrics.md#conservation), or
the reading says it cannot tell. The runs' action spans (torch's ``PP:`` ones, the harness's
twins, GPipe's ``Forward i``) are removed first, as users of un-annotated schedules have them."""

from __future__ import annotations

from pathlib import Path

import pytest

import pipeaudit
from pipeaudit.conformance.strip import ACTION_SPAN, strip_run
from tests.support.paths import SAMPLES

#: Bundled runs whose schedules split backwards into I and W: read from the ops, they say they
#: cannot tell (docs/conformance.md lists the shape).
SPLIT_BACKWARDS = ("zbv", "interleaved-zb", "dualpipev")
RUNS = sorted(p.name for p in SAMPLES.iterdir() if p.is_dir() and list(p.glob("rank*.json.gz"))
              and not p.name.startswith(("single_", "user_loop")))


@pytest.mark.parametrize("name", RUNS)
def test_every_op_is_accounted_for_or_the_reading_says_it_cannot_tell(name: str, tmp_path: Path) -> None:
    bare = strip_run(SAMPLES / name, tmp_path / name, pattern=ACTION_SPAN)
    result = pipeaudit.load(str(bare)).audit()
    assert result.actions_inferred
    if result.uncertain:
        assert any(f"{s}_" in name for s in SPLIT_BACKWARDS), (name, result.uncertain)
        assert result.schedule is None and result.num_microbatches is None
        assert "MISSING_ACTIONS" not in {f.code for f in result.findings}
        return
    assert result.conservation, name
    for row in result.conservation:
        named = (row["in_actions_us"] + row["start_up_us"] + row["grad_scaling_us"]
                 + row["wrap_up_us"] + row["unexplained_us"])
        assert named == pytest.approx(row["compute_us"], rel=1e-9, abs=1e-3), row
        assert row["unexplained_us"] <= 0.01 * row["compute_us"], (name, row)
    assert result.inference_coverage is not None and result.inference_coverage >= 0.99
