"""Published bubble formulas in the commands' output: simulate, sweep and analyze JSON; the
text, Markdown and HTML reports."""

from __future__ import annotations

import json

import pytest

from pipeaudit.schedules import theory
from tests.support.paths import SAMPLES
from tests.support.cli import invoke


def simulate_json(*args: str) -> dict:
    res = invoke("simulate", *map(str, args), "--format", "json")
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def simulate_split(schedule: str, P: int, M: int, tf: float, ti: float, tw: float):
    """simulate JSON of ``schedule`` with the backward split into T_I and T_W, and its
    published figure."""
    d = simulate_json("--schedule", schedule, "-P", P, "-M", M, "--tf", tf, "--tb", ti + tw,
                      "--tw", tw)
    return d, d["bubble"]["published"]


def fraction(bubble_time: float, busy: float) -> float:
    return bubble_time / (busy + bubble_time)


def test_dualpipev_json_carries_deepseeks_formula_over_the_step():
    d = simulate_json("--schedule", "dualpipev", "-P", "4", "-M", "8", "--tf", "1", "--tb", "2",
                      "--tw", "1")
    pub = d["bubble"]["published"]
    # per chunk: F = 0.5, B = 1, W = 0.5; PP = 8 stages; F&B = F + B (torch runs a pair in turn)
    F, B, W, P, M = 0.5, 1.0, 0.5, 4, 8
    bubble_time = (2 * P / 2 - 1) * ((F + B) + B - 3 * W)
    assert pub["bubble_time"] == pytest.approx(bubble_time)
    assert pub["value"] == pytest.approx(fraction(bubble_time, 2 * M * (F + B)))  # 1/9
    assert pub["value_is"] == "fraction of the step"
    assert set(pub) >= {"formula", "source", "value", "assumptions", "differs", "holds"}
    assert "DualPipe" in pub["source"] and pub["holds"]
    # the per-step theory and the simulation agree with it: pairs run as torch runs them
    assert d["bubble"]["theory"] == pytest.approx(pub["value"])
    assert d["bubble"]["simulated"] == pytest.approx(pub["value"])
    assert "assumes real F/B overlap" not in json.dumps(d)


@pytest.mark.parametrize("tf,ti,tw", [(1.0, 1.0, 1.0), (1.0, 1.5, 0.5), (1.2, 0.8, 0.4)])
def test_zb_h1_json_is_the_papers_formula_and_the_replay(tf, ti, tw):
    P, M = 4, 8
    d, pub = simulate_split("zb-h1", P, M, tf, ti, tw)
    bubble_time = (P - 1) * (tf + ti - tw)  # (p-1)(T_F+T_B-T_W), the paper's T_B = our T_I
    assert pub["value"] == pytest.approx(fraction(bubble_time, M * (tf + ti + tw)))
    assert "Zero Bubble" in pub["source"] and pub["holds"]
    assert d["bubble"]["simulated"] == pytest.approx(pub["value"])


@pytest.mark.parametrize("tf,ti,tw", [(1.0, 1.0, 1.0), (1.0, 0.6, 0.5), (1.0, 2.5, 1.0)])
def test_zb_h2_published_and_per_step(tf, ti, tw):
    P, M = 4, 8
    d, pub = simulate_split("zb-h2", P, M, tf, ti, tw)
    busy = M * (tf + ti + tw)
    published = (P - 1) * (tf + ti - 2 * tw)  # (p-1)(T_F+T_B-2T_W)
    assert pub["value"] == pytest.approx(fraction(published, busy))
    sim_time = d["makespan"] - busy
    assert sim_time >= (P - 1) * tf - 1e-9  # no step has less: the last rank's first input
    if ti >= 2 * tw:
        assert sim_time == pytest.approx(published) and "the same bubble time" in pub["differs"]
    else:
        gap = (P - 1) * (2 * tw - ti)
        assert sim_time - published == pytest.approx(gap)
        assert "steady state" in pub["differs"] and f"{gap:.6g}" in pub["differs"]


def test_zbv_zero_is_a_steady_state_figure():
    d = simulate_json("--schedule", "zbv", "-P", "4", "-M", "8", "--tf", "1", "--tb", "2",
                      "--tw", "1")
    pub = d["bubble"]["published"]
    assert pub["value"] == 0 and pub["holds"]  # per chunk T_F = T_I = T_W = 0.5
    # inside one step rank P-1 waits P-1 forward chunks: (P-1) T_F = 1.5 per rank
    assert d["makespan"] - 2 * 8 * 1.5 == pytest.approx(3 * 0.5)
    assert "steady state" in pub["differs"] and "1.5" in pub["differs"]
    other = theory("zbv", 4, 8, 2, t_f=1, t_b=3, t_w=1)  # T_I = 2 != T_F
    assert not other.published.holds


def test_sweep_and_compare_json_carry_published():
    d = simulate_json("--compare", "zb-h1,dualpipev", "-P", "4", "-M", "8", "--tw", "1")
    assert [c["bubble"]["published"]["value"] is not None for c in d["compare"]] == [True, True]
    d = simulate_json("--schedule", "zb-h2", "-P", "2", "--sweep-microbatches", "4,8")
    assert all(r["bubble"]["published"]["formula"].startswith("(p-1)") for r in d["sweep"])


@pytest.mark.parametrize("sample", ["dualpipev_p4_m8", "zbv_p4_m8", "1f1b_p4_m8"])
def test_analyze_json_evaluates_the_formula_at_the_measured_durations(sample):
    res = invoke("analyze", str(SAMPLES / sample), "--format", "json")
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    pub = d["bubble"]["published"]
    assert set(pub) >= {"formula", "source", "value", "assumptions"} and pub["time_unit"] == "us"
    # the audit's mean measured duration of each kind, from the stage table
    totals = {k: sum(s["compute_us"][k] for s in d["stages"]) for k in "FBIW"}
    counts = {k: sum(s["actions"][k] for s in d["stages"]) for k in "FBIW"}
    mean = {k: totals[k] / counts[k] if counts[k] else 0.0 for k in "FBIW"}
    P, M = d["num_ranks"], d["num_microbatches"]
    if sample.startswith("dualpipev"):
        tf, tw, tb = mean["F"], mean["W"], mean["I"] + mean["W"]
        bubble_time = (P - 1) * ((tf + tb) + tb - 3 * tw)
        busy = 2 * M * (tf + tb)
    elif sample.startswith("zbv"):
        bubble_time, busy = 0.0, 1.0
    else:
        tf, tb = mean["F"], mean["B"]
        bubble_time, busy = (P - 1) * (tf + tb), M * (tf + tb)
    assert pub["value"] == pytest.approx(fraction(bubble_time, busy), rel=1e-6)
    assert d["bubble"]["theory"] is not None


def test_reports_show_published_next_to_theory(tmp_path):
    run = str(SAMPLES / "zbv_p2_m4")
    text = invoke("analyze", run, "--verbose").output
    assert "published: 0 at T_F = T_B = T_W" in text and "against the per-step theory" in text
    assert "published:" not in invoke("analyze", run).output  # one screen: behind --verbose
    md = invoke("analyze", run, "--format", "markdown").output
    assert "- **published**:" in md and "Zero Bubble" in md
    html = tmp_path / "r.html"
    assert invoke("analyze", run, "--html", str(html)).exit_code == 0
    page = html.read_text()
    assert "theory (per step)" in page and "published" in page and "Zero Bubble PP README" in page
