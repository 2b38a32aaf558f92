"""Compute conservation on every bundled real run read from its ops: each compute op of the
schedule's thread lies in an action or in a named category (docs/metrics.md#conservation). The
runs' action spans (torch's ``PP:`` ones, the harness's twins, GPipe's ``Forward i``) are
removed first, as users of un-annotated schedules have them. The runs whose schedules split
backwards into I and W read as their annotated twins do."""

from __future__ import annotations

from pathlib import Path

import pytest

import pipeaudit
from pipeaudit.conformance.strip import ACTION_SPAN, strip_run
from tests.support.paths import SAMPLES

#: Bundled runs whose schedules split backwards into I and W (zero-bubble, V-shaped, DualPipeV).
SPLIT_BACKWARDS = ("zbv", "interleaved-zb", "dualpipev")
RUNS = sorted(p.name for p in SAMPLES.iterdir() if p.is_dir() and list(p.glob("rank*.json.gz"))
              and not p.name.startswith(("single_", "user_loop")))
SPLIT_RUNS = [r for r in RUNS if any(f"{s}_" in r for s in SPLIT_BACKWARDS)]


@pytest.mark.parametrize("name", RUNS)
def test_every_op_is_accounted_for(name: str, tmp_path: Path) -> None:
    bare = strip_run(SAMPLES / name, tmp_path / name, pattern=ACTION_SPAN)
    result = pipeaudit.load(str(bare)).audit()
    assert result.actions_inferred
    assert not result.uncertain, (name, result.uncertain)
    assert result.conservation, name
    for row in result.conservation:
        named = (row["in_actions_us"] + row["start_up_us"] + row["grad_scaling_us"]
                 + row["wrap_up_us"] + row["unexplained_us"])
        assert named == pytest.approx(row["compute_us"], rel=1e-9, abs=1e-3), row
        assert row["unexplained_us"] <= 0.01 * row["compute_us"], (name, row)
    assert result.inference_coverage is not None and result.inference_coverage >= 0.99


@pytest.mark.parametrize("name", SPLIT_RUNS)
def test_split_backwards_read_from_the_ops_as_annotated(name: str, tmp_path: Path) -> None:
    """I and W (and DualPipeV's full backwards) told apart without spans: the schedule, M, v
    and every rank's bubble are the annotated reading's."""
    assert len(SPLIT_RUNS) >= 6
    bare = strip_run(SAMPLES / name, tmp_path / name, pattern=ACTION_SPAN)
    ops, spans = pipeaudit.load(str(bare)).audit(), pipeaudit.load(str(SAMPLES / name)).audit()
    assert ops.actions_inferred and not spans.actions_inferred
    assert (ops.schedule, ops.num_microbatches, ops.num_chunks) == \
        (spans.schedule, spans.num_microbatches, spans.num_chunks)
    assert "MISSING_ACTIONS" not in {f.code for f in ops.findings}
    theirs = {r.rank: r.bubble for r in spans.ranks}
    for r in ops.ranks:
        assert r.bubble == pytest.approx(theirs[r.rank], abs=0.001), (name, r.rank)
