"""The harness's own ``PP:<stage><kind><mb>`` annotations (imports torch).

torch's runtime schedules wrap each action in ``record_function("PP:2F0")``;
``Schedule1F1B`` writes nothing and ``ScheduleGPipe`` writes ``Forward i`` /
``Backward i``. For those the harness wraps the stage's ``forward_one_chunk`` and
``backward_one_chunk`` so each F/B gets a span named exactly like torch's
(global stage index, microbatch index). An action holds its input's delivery and
its compute (docs/metrics.md): on the last stage a forward's span stays open
until the schedule has computed that microbatch's loss (``_maybe_compute_loss``),
as torch's runtime spans hold it; a backward's span closes when the autograd
engine is done (``backward_maybe_with_nosync`` returns), before the last stage
detaches its output (cleanup, no compute of the backward). Scope difference worth knowing: torch's
runtime span also contains the wait for the incoming P2P recv; the harness span
does not, because the recv waits happen in the schedule outside those methods
(a wait is no compute either way).
"""

from __future__ import annotations

import functools

from torch.profiler import record_function


def annotate_stage(stage, schedule=None) -> None:
    """Wrap ``stage``'s forward/backward (instance attributes, nothing global); with the
    ``schedule`` that runs a last stage, its loss joins the forward's span."""
    index = stage.stage_index
    fwd = stage.forward_one_chunk
    bwd = stage.backward_one_chunk
    loss_joins = schedule is not None and stage.is_last
    open_forwards: dict[int, record_function] = {}

    @functools.wraps(fwd)
    def forward_one_chunk(fwd_chunk_id, *args, **kwargs):
        span = record_function(f"PP:{index}F{fwd_chunk_id}")
        span.__enter__()
        try:
            out = fwd(fwd_chunk_id, *args, **kwargs)
        except BaseException:
            span.__exit__(None, None, None)
            raise
        if loss_joins:
            open_forwards[fwd_chunk_id] = span  # closed once the loss is computed
        else:
            span.__exit__(None, None, None)
        return out

    if loss_joins:
        compute_loss = schedule._maybe_compute_loss

        @functools.wraps(compute_loss)
        def maybe_compute_loss(st, output, target_mbs, mb_index, *args, **kwargs):
            try:
                return compute_loss(st, output, target_mbs, mb_index, *args, **kwargs)
            finally:
                span = open_forwards.pop(mb_index, None) if st is stage else None
                if span is not None:
                    span.__exit__(None, None, None)

        schedule._maybe_compute_loss = maybe_compute_loss

    open_backward: list = []  # the B/I span of the backward_one_chunk call in progress
    run_backward = stage.backward_maybe_with_nosync

    def close_backward() -> None:
        if open_backward:
            open_backward.pop().__exit__(None, None, None)

    @functools.wraps(run_backward)
    def backward_maybe_with_nosync(*args, **kwargs):
        try:
            return run_backward(*args, **kwargs)
        finally:  # the autograd engine is done: what follows is the stage's cleanup
            close_backward()

    @functools.wraps(bwd)
    def backward_one_chunk(bwd_chunk_id, *args, **kwargs):
        kind = "B" if kwargs.get("full_backward", True) else "I"
        span = record_function(f"PP:{index}{kind}{bwd_chunk_id}")
        span.__enter__()
        open_backward.append(span)
        try:
            return bwd(bwd_chunk_id, *args, **kwargs)
        finally:
            close_backward()

    stage.forward_one_chunk = forward_one_chunk
    stage.backward_one_chunk = backward_one_chunk
    stage.backward_maybe_with_nosync = backward_maybe_with_nosync
