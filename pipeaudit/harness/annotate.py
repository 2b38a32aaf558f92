"""The harness's own ``PP:<stage><kind><mb>`` annotations (imports torch).

torch's runtime schedules wrap each action in ``record_function("PP:2F0")``;
``Schedule1F1B`` writes nothing and ``ScheduleGPipe`` writes ``Forward i`` /
``Backward i``. For those the harness wraps the stage's ``forward_one_chunk`` and
``backward_one_chunk`` so each F/B gets a span named exactly like torch's
(global stage index, microbatch index). Scope difference worth knowing: torch's
runtime span also contains the wait for the incoming P2P recv (and the loss on
the last stage); the harness span contains only the stage's forward/backward
compute, because the recv waits happen in the schedule outside those methods.
"""

from __future__ import annotations

import functools

from torch.profiler import record_function


def annotate_stage(stage) -> None:
    """Wrap ``stage``'s forward/backward (instance attributes, nothing global)."""
    index = stage.stage_index
    fwd = stage.forward_one_chunk
    bwd = stage.backward_one_chunk

    @functools.wraps(fwd)
    def forward_one_chunk(fwd_chunk_id, *args, **kwargs):
        with record_function(f"PP:{index}F{fwd_chunk_id}"):
            return fwd(fwd_chunk_id, *args, **kwargs)

    @functools.wraps(bwd)
    def backward_one_chunk(bwd_chunk_id, *args, **kwargs):
        kind = "B" if kwargs.get("full_backward", True) else "I"
        with record_function(f"PP:{index}{kind}{bwd_chunk_id}"):
            return bwd(bwd_chunk_id, *args, **kwargs)

    stage.forward_one_chunk = forward_one_chunk
    stage.backward_one_chunk = backward_one_chunk
