"""Backward actions from autograd-engine calls (pipeaudit/timeline/engine_calls.py), on op
sequences built here with a known answer: which ops each action holds."""

from __future__ import annotations

import numpy as np

from pipeaudit.timeline.engine_calls import (
    ACCUMULATE, HANDOFF, IN_PLACE, NO_GLUE, PREP, backward_actions, split_calls,
)

# op codes: backward ops are 10-19, glue and other ops below
LN_B, MM_B, ACC, T_B, GELU_B = 10, 11, 12, 13, 14
VIEW_AS, ADD_, LINEAR, DETACH_ = 1, 2, 3, 4


def _layout(tokens: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray, list[tuple[int, int]]]:
    """(codes, glue classes, backward blocks) of a sequence of (code, glue class) ops; a block
    is a maximal run of backward codes."""
    codes = np.array([c for c, _ in tokens])
    glue = np.array([g for _, g in tokens], dtype=np.int8)
    blocks, start = [], None
    for i, c in enumerate(codes.tolist() + [0]):
        if c >= 10 and start is None:
            start = i
        elif c < 10 and start is not None:
            blocks.append((start, i - 1))
            start = None
    return codes, glue, blocks


def _w(calls: int) -> list[tuple[int, int]]:
    """A W as torch runs it: views, then one engine call per parameter group, each followed by
    the in-place accumulation of its gradient."""
    out = [(VIEW_AS, PREP)] * 3
    for _ in range(calls):
        out += [(MM_B, NO_GLUE), (ACC, NO_GLUE), (T_B, NO_GLUE), (ADD_, IN_PLACE)]
    return out


I = [(VIEW_AS, PREP), (MM_B, NO_GLUE), (GELU_B, NO_GLUE), (LN_B, NO_GLUE)]
F = [(LINEAR, NO_GLUE)]


def test_a_w_of_several_calls_is_one_action_with_its_glue():
    codes, glue, blocks = _layout(F + I + F + _w(3) + F)
    assert len(blocks) == 4
    acts = backward_actions(split_calls(blocks, codes), glue, codes, None)
    assert acts == [(1, 4), (6, 20)]  # the I with its views; the W's views, calls and adds


def test_two_ws_back_to_back_are_two_actions_where_one_w_is_seen_alone():
    seq = F + _w(2) + F + _w(2) + _w(2) + F
    codes, glue, blocks = _layout(seq)
    acts = backward_actions(split_calls(blocks, codes), glue, codes, None)
    w = len(_w(2))
    assert acts == [(1, w), (w + 2, 2 * w + 1), (2 * w + 2, 3 * w + 1)]
    # glue between the two: each W's add_ stays with it, the next W's views with the next
    assert codes[2 * w + 1] == ADD_ and codes[2 * w + 2] == VIEW_AS


def test_a_run_never_seen_in_parts_is_one_action():
    codes, glue, blocks = _layout(F + _w(2) + _w(2) + F)
    assert len(backward_actions(split_calls(blocks, codes), glue, codes, None)) == 1


def test_calls_with_nothing_between_split_where_each_is_seen_alone():
    call_a = [(MM_B, NO_GLUE), (ACC, NO_GLUE)]
    call_b = [(LN_B, NO_GLUE), (GELU_B, NO_GLUE), (MM_B, NO_GLUE)]
    codes, glue, blocks = _layout(F + call_a + F + call_b + F + call_a + call_b + F)
    assert len(blocks) == 3
    assert split_calls(blocks, codes) == [(1, 2), (4, 6), (8, 9), (10, 12)]


def test_a_transfer_or_a_forward_ends_a_run_and_a_handoff_detach_is_the_action_s():
    sent = I + [(DETACH_, HANDOFF)]
    codes, glue, blocks = _layout(F + sent + I + F)
    acts = backward_actions(split_calls(blocks, codes), glue, codes, None)
    assert acts == [(1, 5), (6, 9)]


def test_an_out_of_place_sum_is_glue_between_calls_only():
    # on GPU torch accumulates with aten::add between a W's calls; one before a run's views is
    # a forward's (its residual add), never the backward's
    seq = F + [(LINEAR, NO_GLUE), (0, ACCUMULATE)] + I + F
    codes, glue, blocks = _layout(seq)
    acts = backward_actions(split_calls(blocks, codes), glue, codes, None)
    assert acts == [(3, 6)]
    gpu_w = [(VIEW_AS, PREP), (MM_B, NO_GLUE), (0, ACCUMULATE), (LN_B, NO_GLUE)]
    codes, glue, blocks = _layout(F + gpu_w + F)
    assert backward_actions(split_calls(blocks, codes), glue, codes, None) == [(1, 4)]
