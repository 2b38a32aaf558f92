"""Pipelines from who sends to whom: a ring of two ranks (a looped schedule at P = 2) starts at
the first stage whatever the greedy pairing took first (pipeaudit.timeline.peers)."""

from __future__ import annotations

import numpy as np

from pipeaudit.timeline.peers import _Flows, _ring_start


def _flows(first_send: int) -> _Flows:
    sends = np.array([first_send, first_send + 100], dtype=np.int64)
    return _Flows(sends, sends + 10, sends + 50, sends + 60)


def test_a_ring_of_two_starts_at_the_rank_that_sends_activations_first() -> None:
    flows = {0: _flows(1_000), 1: _flows(5_000)}
    both_ways = {(0, 1), (1, 0)}
    assert _ring_start((1, 0), both_ways, flows) == (0, 1)
    assert _ring_start((0, 1), both_ways, flows) == (0, 1)


def test_a_chain_that_is_no_ring_keeps_its_order() -> None:
    flows = {0: _flows(5_000), 1: _flows(1_000), 2: _flows(3_000)}
    assert _ring_start((0, 1, 2), {(0, 1), (1, 2)}, flows) == (0, 1, 2)
    assert _ring_start((0, 1, 2), {(0, 1), (1, 2), (2, 0)}, flows) == (1, 2, 0)
