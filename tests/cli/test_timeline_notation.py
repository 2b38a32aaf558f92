"""One timeline notation for ``simulate`` and ``analyze`` (report/ascii_timeline.py)."""

from __future__ import annotations

import re


from pipeaudit.report.ascii_timeline import CONTINUE, IDLE, WAIT, Item, action_label, legend, render
from tests.support.paths import SAMPLES
from tests.support.cli import invoke


def _rows(text: str) -> list[str]:
    """The rank rows of a timeline: what lies between 'rank N |' and the end (or '|'), a
    timeline drawn in bands (simulate, wider than a line) joined per rank."""
    rows: dict[str, list[str]] = {}
    for m in re.finditer(r"^rank (\d+) +\|\s?(.*?)\|?$", text, re.M):
        rows.setdefault(m.group(1), []).append(m.group(2))
    return [" ".join(parts) for parts in rows.values()]


def test_labels_carry_the_stage_only_when_a_rank_holds_several():
    assert action_label("F", 3) == "F3" and action_label("W", 12, 7) == "7W12"
    assert "2F3 is stage 2's F3" in legend(True) and "stage" not in legend(False)


def test_simulate_and_analyze_write_the_same_notation():
    sim = invoke("simulate", "--schedule", "zbv", "-P", "2", "-M", "4", "--tb",
                 "4").output
    ana = invoke("analyze", str(SAMPLES / "zbv_p2_m4")).output
    assert legend(True) in sim and legend(True, waits=True) in ana
    for out in (sim, ana):
        rows = _rows(out)
        assert len(rows) == 2
        body = "".join(rows)
        assert CONTINUE in body and IDLE in body
    assert WAIT not in "".join(_rows(sim))  # a replay has no waiting inside an action
    # V placement, P = 2: rank 0 holds stages 0 and 3, so its labels say which stage
    assert re.search(r"\b3F0\b", _rows(sim)[0]) and re.search(r"\b0F0\b", _rows(sim)[0])
    assert "3F" in _rows(ana)[0] or "3I" in _rows(ana)[0]


def test_one_stage_per_rank_has_plain_labels():
    sim = invoke("simulate", "--schedule", "1f1b", "-P", "4", "-M", "8").output
    ana = invoke("analyze", str(SAMPLES / "1f1b_p4_m8")).output
    assert legend(False) in sim and legend(False, waits=True) in ana
    for out in (sim, ana):
        assert "2F3 is stage 2's F3" not in out
        assert re.search(r"\bB7\b|B7", _rows(out)[3])


def test_waiting_inside_an_action_is_drawn_apart_from_its_compute():
    """An action of 10 cells computing in its first and last cell only: label, waits, compute;
    the same span computing throughout is label then '='."""
    waits = Item(0, 0.0, 10.0, "F1", ((0.0, 1.0), (9.0, 10.0)))
    busy = Item(1, 0.0, 10.0, "F1", ((0.0, 10.0),))
    text = render([waits, busy], [0, 1], width=10)
    assert _rows(text) == ["F1" + WAIT * 7 + CONTINUE, "F1" + CONTINUE * 8]


def test_an_unannotated_run_shows_its_waits():
    """DeepSpeed's PipelineEngine writes no per-action spans: its actions run to the end of
    their send/recv, and the timeline draws those waits as '-' (the JSON's compute of the
    same actions is far below their span)."""
    out = invoke("analyze", str(SAMPLES / "deepspeed_p4_m8")).output
    rows = _rows(out)
    assert len(rows) == 4 and all(WAIT in r for r in rows)
    assert sum(r.count(WAIT) for r in rows) > 20


def _labels_per_rank(text: str) -> dict[int, list[str]]:
    """Per rank, the labels on its row and on the label lines under it."""
    out: dict[int, list[str]] = {}
    rank = None
    for line in text.splitlines():
        m = re.match(r"^rank (\d+) +\|(.*)\|$", line)
        if m:
            rank = int(m.group(1))
            out[rank] = re.findall(r"\d*[FBIW]\d+", m.group(2))
        elif rank is not None and re.match(r"^ +\|[^0-9]*[FBIW]\d", line):
            out[rank] += re.findall(r"\d*[FBIW]\d+", line)
        elif not line.startswith(" "):
            rank = None
    return out


def test_every_microbatch_number_is_on_the_page():
    """The bundled imbalanced run: stage 1's actions leave short ones on the other ranks
    (F0 F1 F2 one cell each on rank 0). Each rank shows each of its 16 actions' labels once:
    on its row, or on the line under it."""
    out = invoke("analyze", str(SAMPLES / "1f1b_p4_m8_imb_s1x3")).output
    labels = _labels_per_rank(out)
    expected = sorted(f"{k}{m}" for k in "FB" for m in range(8))
    assert sorted(labels) == [0, 1, 2, 3]
    for rank, found in labels.items():
        assert sorted(found) == expected, (rank, found)
    assert re.search(r"^rank 0 +\|FFF", out, re.M)  # the short ones do show their kind


def test_label_lines_keep_order_and_room():
    """Labels go at their column, else one space after the label before; a label that
    would pass the width starts a new line."""
    from pipeaudit.report.ascii_timeline import label_lines

    assert label_lines([(0, "F0"), (1, "F1"), (2, "F2"), (20, "B3")], 30) == [
        "F0 F1 F2            B3"]
    assert label_lines([(6, "F10"), (7, "F11")], 10) == ["      F10", "       F11"]
    assert label_lines([], 10) == []


def test_explain_legend_names_every_cell():
    """explain's timeline draws waits ('-') and labels under the rank: its legend says so."""
    out = invoke("explain", str(SAMPLES / "1f1b_p4_m8_imb_s1x3")).output
    assert legend(False, waits=True) in out
    assert WAIT in "".join(_rows(out))
