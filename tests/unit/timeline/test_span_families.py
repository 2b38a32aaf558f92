"""The user's own action spans found without ``--action-pattern`` (span families)."""

from __future__ import annotations

import re

import pytest

from pipeaudit.timeline.span_families import detect_family


def _names(template: str, stages: int = 2, mbs: int = 3, kinds=("fwd", "bwd")) -> list[tuple[str, int]]:
    return [(template.format(s=s, k=k, m=m), 1) for s in range(stages) for k in kinds
            for m in range(mbs)]


@pytest.mark.parametrize("template,shown,stage_group", [
    ("s{s}_{k}_mb{m}", "s{stage}_{fwd|bwd}_mb{mb}", True),
    ("stage{s}/{k}/{m}", "stage{stage}/{fwd|bwd}/{mb}", True),
    ("mb{m}.{k}.stage{s}", "mb{mb}.{fwd|bwd}.stage{stage}", True),
    ("{k}_{m}", "{fwd|bwd}_{mb}", False),
])
def test_families_in_any_order_and_separator(template, shown, stage_group):
    fam = detect_family(_names(template, stages=2 if "{s}" in template else 1))
    assert fam is not None and fam.shown == shown
    assert ("(?P<stage>" in fam.pattern) == stage_group
    rx = re.compile(fam.pattern)
    m = rx.match(template.format(s=1, k="bwd", m=2))
    assert m and m["kind"] == "bwd" and m["mb"] == "2"
    if stage_group:
        assert m["stage"] == "1"


def test_two_numbers_without_words_the_fewer_values_is_the_stage():
    fam = detect_family(_names("x{s}-{k}-{m}", stages=2, mbs=6))
    assert fam is not None and fam.shown == "x{stage}-{fwd|bwd}-{mb}"
    fam = detect_family(_names("x{m}-{k}-{s}", stages=2, mbs=6))
    assert fam is not None and fam.shown == "x{mb}-{fwd|bwd}-{stage}"


@pytest.mark.parametrize("names", [
    [("s0_fwd_mb0", 1), ("s0_fwd_mb1", 1)],  # forwards only: no action family
    [("s0_fwd_mb0", 1), ("s0_bwd_mb0", 1)],  # one microbatch value: nothing varies
    [("PP:0F0", 1), ("PP:0B0", 1), ("PP:0F1", 1), ("PP:0B1", 1)],  # torch's, read elsewhere
    [("ProfilerStep#0", 1), ("ProfilerStep#1", 1)],
    [("aten::linear", 5), ("autograd::engine::evaluate_function: AddmmBackward0", 5)],
])
def test_no_family(names):
    assert detect_family(names) is None


def test_the_largest_family_wins():
    names = _names("s{s}_{k}_mb{m}", mbs=8) + _names("dbg {k} {m}", stages=1, mbs=2)
    fam = detect_family(names)
    assert fam is not None and fam.shown.startswith("s{stage}")
    assert fam.spans == 2 * 2 * 8
