"""One timeline notation for ``simulate`` and ``analyze`` (report/ascii_timeline.py)."""

from __future__ import annotations

import re


from pipeaudit.report.ascii_timeline import CONTINUE, IDLE, action_label, legend
from tests.support.paths import SAMPLES
from tests.support.cli import invoke


def _rows(text: str) -> list[str]:
    """The rank rows of a timeline: what lies between 'rank N |' and the end (or '|')."""
    return [m.group(1) for m in re.finditer(r"^rank \d+ +\|\s?(.*?)\|?$", text, re.M)]


def test_labels_carry_the_stage_only_when_a_rank_holds_several():
    assert action_label("F", 3) == "F3" and action_label("W", 12, 7) == "7W12"
    assert "2F3 is stage 2's F3" in legend(True) and "stage" not in legend(False)


def test_simulate_and_analyze_write_the_same_notation():
    sim = invoke("simulate", "--schedule", "zbv", "-P", "2", "-M", "4", "--tb",
                 "4").output
    ana = invoke("analyze", str(SAMPLES / "zbv_p2_m4")).output
    for out in (sim, ana):
        assert legend(True) in out
        rows = _rows(out)
        assert len(rows) == 2
        body = "".join(rows)
        assert CONTINUE in body and IDLE in body and "-" not in body
    # V placement, P = 2: rank 0 holds stages 0 and 3, so its labels say which stage
    assert re.search(r"\b3F0\b", _rows(sim)[0]) and re.search(r"\b0F0\b", _rows(sim)[0])
    assert "3F" in _rows(ana)[0] or "3I" in _rows(ana)[0]


def test_one_stage_per_rank_has_plain_labels():
    sim = invoke("simulate", "--schedule", "1f1b", "-P", "4", "-M", "8").output
    ana = invoke("analyze", str(SAMPLES / "1f1b_p4_m8")).output
    for out in (sim, ana):
        assert legend(False) in out and legend(True) not in out
        assert re.search(r"\bB7\b|B7", _rows(out)[3])
