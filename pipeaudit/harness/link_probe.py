"""Time the stage-to-stage link before the profiled steps (manifest ``p2p_link``).

A pipelined run sends all its messages at one size, which cannot separate the link's latency
from its bandwidth; predicting another microbatch count needs both
(:mod:`pipeaudit.explain.link`). The first rank of the pipeline and its downstream neighbour
send messages of a quarter, one and four microbatches' activations back and forth, over the
run's own process group and devices, outside the profiler's window; each round trip's half is
one sample. Every other rank only waits at the barrier.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from pipeaudit.explain.link import block_message_bytes
from pipeaudit.harness.config import ProfileConfig

#: Message sizes, in microbatch activations (one microbatch's message is 1).
SIZES = (0.25, 1.0, 4.0)
#: Timed round trips per size, after one untimed.
ROUND_TRIPS = 5
#: The smallest message timed (bytes).
MIN_BYTES = 4096


def probe_link(rank: int, peer: int | None, first: bool, message_bytes: int,
               device: torch.device) -> list[list[float]] | None:
    """Time the link between ``rank`` and ``peer`` (``first``: ``rank`` starts each round
    trip and returns the samples, ``[bytes, one-way seconds]``; the peer returns None).
    ``peer`` None: this rank takes no part. Every rank of the job must call it."""
    samples: list[list[float]] | None = [] if first else None
    if peer is not None:
        on_gpu = device.type == "cuda"
        for scale in SIZES:
            n = max(MIN_BYTES, int(message_bytes * scale)) // 4
            buf = torch.zeros(n, dtype=torch.float32, device=device)
            for trip in range(ROUND_TRIPS + 1):
                t0 = time.perf_counter()
                if first:
                    dist.send(buf, peer)
                    dist.recv(buf, peer)
                else:
                    dist.recv(buf, peer)
                    dist.send(buf, peer)
                if on_gpu:
                    torch.cuda.synchronize(device)
                if first and trip:
                    samples.append([float(n * 4), (time.perf_counter() - t0) / 2])
    dist.barrier()
    return samples


def time_link(config: ProfileConfig, rank: int, device: torch.device) -> list[list[float]] | None:
    """The link from the first stage's rank to the next, timed around one microbatch's
    activations; the samples on the first rank, None elsewhere. Every rank of the job must
    call it."""
    pipe = config.layout.pipeline()
    first, second = (pipe[0], pipe[1]) if len(pipe) > 1 else (None, None)
    peer = second if rank == first else first if rank == second else None
    model = config.model
    message = block_message_bytes(config.batch_size, model.seq_len, model.hidden,
                                  config.microbatches)
    return probe_link(rank, peer, rank == first, int(message), device)
