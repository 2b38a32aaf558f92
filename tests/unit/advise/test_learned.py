"""What ``advise --verify`` learns from its reruns: known answers for the size factors (per M,
per chunk count) and for the order and the stop of the reruns."""

from __future__ import annotations

import math

import pytest

from pipeaudit.advise.learned import (
    ActionSizes, SizeFactors, by_prediction, learning_notes, rerun_sequence,
)


def test_size_factor_before_any_rerun_is_one():
    assert SizeFactors(8).factor(2) == 1.0
    assert SizeFactors(8).factor(8) == 1.0


def test_size_factor_is_the_median_of_its_reruns():
    f = SizeFactors(8)
    for x in (0.9, 0.7, 0.8):
        f.add(4, x)
    assert f.factor(4) == pytest.approx(0.8)


def test_size_factor_between_sizes_is_interpolated_in_log_m():
    f = SizeFactors(8)
    f.add(2, 0.81)
    # M = 4 halfway between 2 and 8 in log M: the geometric mean of 0.81 and 1.0
    assert f.factor(4) == pytest.approx(0.9)
    # M = 6: t = log(6/2)/log(8/2)
    t = math.log(3) / math.log(4)
    assert f.factor(6) == pytest.approx(0.81 ** (1 - t))


def test_size_factor_is_not_extrapolated():
    f = SizeFactors(8)
    f.add(4, 0.9)
    assert f.factor(2) == pytest.approx(0.9)   # below the smallest size run: its factor
    assert f.factor(16) == 1.0                 # above the measured configuration's: 1
    f.add(8, 1.1)                              # a rerun at the measured M replaces the 1
    assert f.factor(16) == pytest.approx(1.1)


def _runner(measured: dict, log: list):
    def run(key):
        log.append(key)
        t = measured[key]
        return None if t is None else {"step_time_us": t}
    return run


def test_reruns_reorder_by_what_they_learned():
    # calibrated order a < c < b; a's rerun shows M = 4 at 0.9x, so b (M = 4, 105 -> 94.5)
    # comes before c (M = 16, still 103)
    pending = [("a", (4, 1), 100.0), ("c", (16, 1), 103.0), ("b", (4, 1), 105.0)]
    log: list = []
    done, sizes = rerun_sequence(pending, (8, 1), 120.0,
                                 _runner({"a": 90.0, "b": 95.0, "c": 99.0}, log),
                                 top=3, band=0.1)
    assert log == ["a", "b", "c"]
    assert [r.learned_us for r in done] == pytest.approx([100.0, 94.5, 103.0])
    assert [r.calibrated_us for r in done] == [100.0, 105.0, 103.0]
    assert sizes.factor((4, 1)) == pytest.approx(median_of(0.9, 95.0 / 105.0))


def median_of(x: float, y: float) -> float:
    return (x + y) / 2


def test_auto_stops_when_nothing_left_is_within_the_band_of_the_fastest_measured():
    pending = [("a", (8, 1), 95.0), ("b", (8, 1), 120.0)]
    log: list = []
    done, _ = rerun_sequence(pending, (8, 1), 100.0, _runner({"a": 95.0, "b": 80.0}, log),
                             top=None, band=0.1)
    # b: 120 > 95 x 1.1 once a ran at 95
    assert log == ["a"] and [r.key for r in done] == ["a"]


def test_auto_goes_on_while_a_candidate_is_within_the_band():
    pending = [("a", (8, 1), 95.0), ("b", (8, 1), 100.0)]
    log: list = []
    rerun_sequence(pending, (8, 1), 100.0, _runner({"a": 95.0, "b": 80.0}, log), top=None,
                   band=0.1)
    assert log == ["a", "b"]


def test_auto_always_tries_one_candidate():
    log: list = []
    rerun_sequence([("a", (8, 1), 300.0)], (8, 1), 100.0, _runner({"a": 290.0}, log), top=None,
                   band=0.1)
    assert log == ["a"]


def test_a_failed_rerun_counts_towards_k_and_teaches_nothing():
    log: list = []
    done, sizes = rerun_sequence([("a", (4, 1), 100.0), ("b", (4, 1), 110.0)], (8, 1), 100.0,
                                 _runner({"a": None, "b": 90.0}, log), top=1, band=0.1)
    assert log == ["a"] and done == [] and sizes.learned() == {}


def test_the_notes_say_what_was_learned_and_why_auto_stopped():
    pending = [(("1f1b", 1, 4), (4, 1), 100e3), (("gpipe", 1, 4), (4, 1), 150e3),
               (("zbv", 2, 16), (16, 2), 200e3)]
    done, sizes = rerun_sequence(pending, (8, 1), 120e3, lambda k: {"step_time_us": 90e3},
                                 top=None, band=0.1)
    notes = learning_notes(done, sizes, pending, 90e3, 0.1, auto=True)
    assert notes[0].endswith("M=4 v=1 x0.900")
    # gpipe M=4: 150 x 0.9 = 135 ms learned, the closest left (zbv M=16: 200 x 1.0)
    assert notes[1] == ("--verify auto reran 1 candidate(s) in the order of their learned "
                        "predictions and stopped with 2 left, none predicted within 10% of the "
                        "fastest measured (90.0 ms; the closest, gpipe v=1 M=4, 135.0 ms learned)")
    assert learning_notes(done, sizes, pending, 90e3, 0.1, auto=False) == notes[:1]


def test_by_prediction_orders_what_has_a_prediction():
    calibrated = {("zbv", 2, 4): 90.0, ("1f1b", 1, 8): 80.0, ("gpipe", 1, 2): 95.0}
    keys = [("gpipe", 1, 2), ("zbv", 2, 4), ("1f1b", 1, 8), ("dualpipev", 2, 4)]
    assert by_prediction(calibrated, keys) == [
        (("1f1b", 1, 8), (8, 1), 80.0), (("zbv", 2, 4), (4, 2), 90.0),
        (("gpipe", 1, 2), (2, 1), 95.0)]


def test_a_size_is_its_rows_and_its_layers():
    """What a rerun at M = 2 with one chunk per rank shows stands for two chunks per rank (half
    the layers per action) only until a run with two chunks says otherwise: each chunk count
    learns its own curve, the nearest one that ran standing in until then."""
    sizes = ActionSizes((8, 1))
    sizes.add((2, 1), 0.5)
    assert sizes.factor((2, 1)) == 0.5 and sizes.factor((4, 1)) == pytest.approx(0.5 ** 0.5)
    assert sizes.factor((2, 2)) == 0.5  # nothing ran with v = 2 yet: v = 1's curve
    sizes.add((2, 2), 1.2)
    assert sizes.factor((2, 2)) == 1.2 and sizes.factor((2, 1)) == 0.5
    assert sizes.factor((4, 2)) == pytest.approx(1.2 ** 0.5)
    assert sizes.factor((2, 3)) == 1.2  # the nearest chunk count that ran: 2
    assert sizes.learned() == {(2, 1): 0.5, (2, 2): 1.2}


def test_the_measured_configurations_chunks_keep_their_own_curve():
    """A run of v = 2 anchors v = 2's curve at 1 (its rerun is the calibration): what a v = 1
    rerun shows does not move the v = 2 candidates (a Megatron-core run of interleaved 1F1B,
    then 1F1B at M = 2 ran at 0.4x)."""
    sizes = ActionSizes((4, 2))
    sizes.add((2, 1), 0.4)
    assert sizes.factor((2, 2)) == 1.0 and sizes.factor((2, 1)) == 0.4
