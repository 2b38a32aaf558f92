"""The split-backward reading replaces the plain one only where the plain one falls short
(pipeaudit/timeline/split_backward.py), on a real run that once lost to it."""

from __future__ import annotations

import pipeaudit
from tests.support.paths import DATA

#: Rank 1's file of a Megatron-core interleaved 1F1B run (P = 2, v = 2, M = 4, no step marks,
#: its spans removed), from the conformance matrix's CI slice: read as a split backward, its
#: order at its position also fits a split-backward schedule over half its forwards, and that
#: reading held 84 % of the compute.
ONE_RANK = DATA / "megatron_interleaved_p2_m4_rank1_bare"


def test_a_whole_plain_reading_is_kept_over_a_split_order_that_also_fits():
    result = pipeaudit.load(str(ONE_RANK), allow_missing=True).audit()
    assert not result.uncertain
    assert (result.schedule, result.num_microbatches, result.num_chunks) == ("interleaved-1f1b", 4, 2)
    assert result.inference_coverage is not None and result.inference_coverage >= 0.99
