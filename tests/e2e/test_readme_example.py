"""The README's "Why 1.99x" paragraph is what the bundled runs measure: stage 1's compute per
step in the balanced and the heavy run, the ratio the report prints, the fastest instances of
its actions, the `whatif` factor of the Pictures block (balanced / heavy stage 1 compute) and
what it predicts against the balanced run's median step."""

from __future__ import annotations

import json
import re

import pytest

from tests.support.cli import invoke
from tests.support.paths import REPO, SAMPLES

BALANCED, HEAVY = SAMPLES / "1f1b_p4_m8", SAMPLES / "1f1b_p4_m8_imb_s1x3"


@pytest.fixture(scope="module")
def paragraph() -> str:
    text = (REPO / "README.md").read_text()
    m = re.search(r"\*\*Why 1\.99x, when stage 1 was made 3x heavier\.\*\*(.*?)\n\n", text, re.S)
    assert m, "README: no 'Why 1.99x' paragraph"
    return " ".join(m.group(1).split())


def _json(*args) -> dict:
    res = invoke(*args, "--format", "json")
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_the_numbers_are_the_runs(paragraph):
    stage1 = _json("diff", BALANCED, HEAVY)["stages"][1]
    a, b = stage1["a"]["total_us"] / 1000, stage1["b"]["total_us"] / 1000
    assert f"from {a:.2f} ms there to {b:.2f} ms here ({b / a:.2f}x)" in paragraph
    heavy = _json("analyze", HEAVY)
    imbalance = next(f for f in heavy["findings"] if f["code"] == "STAGE_IMBALANCE")
    median = re.search(r"the median stage \(([\d.]+) ms\)", imbalance["message"]).group(1)
    assert f"median stage, {median} ms: {imbalance['measured']:.2f}x" in paragraph
    balanced = _json("analyze", BALANCED)
    step = _json("whatif", BALANCED)["measured"]["step_time_us"]  # the median step, as analyze's
    assert f"The balanced run measures {step / 1000:.2f} ms" in paragraph
    more = [s["a"]["total_us"] / s["b"]["total_us"] - 1 for s in _json("diff", BALANCED, HEAVY)["stages"]
            if s["stage"] != 1]
    assert f"other stages compute {100 * min(more):.0f}-{100 * max(more):.0f} % more per step" in paragraph
    for run in (balanced, heavy):
        assert f"{100 * run['bubble']['overhead_part']:.1f} %" in paragraph


def test_the_fastest_instances(paragraph):
    import pipeaudit

    def fastest(run, kind) -> float:
        a = pipeaudit.load(str(run)).actions()
        return a.filter((a["stage"] == 1) & (a["kind"] == kind))["compute_ns"].min() / 1e6

    for kind in "FB":
        lo, hi = fastest(BALANCED, kind), fastest(HEAVY, kind)
        assert f"{kind} {lo:.2f} to {hi:.2f} ms" in paragraph or f"{kind} {lo:.2f} → {hi:.2f}" in paragraph
        # what stays per action: a + 3b against a + b
        fixed = lo - (hi - lo) / 2
        assert 0 < fixed < 0.5 * lo


def test_the_whatif_factor_and_its_prediction(paragraph):
    readme = (REPO / "README.md").read_text()
    factor = re.search(r"pipeaudit whatif +sample_traces/1f1b_p4_m8_imb_s1x3 --scale 1=([\d.]+)",
                       readme).group(1)
    stage1 = _json("diff", BALANCED, HEAVY)["stages"][1]
    assert factor == f"{stage1['a']['total_us'] / stage1['b']['total_us']:.3f}"
    assert f"= {factor}, not 1/3" in paragraph
    pred = _json("whatif", HEAVY, "--scale", f"1={factor}")["predicted"]["step_time_us"] / 1000
    assert f"predicts {pred:.1f} ms per step" in paragraph
