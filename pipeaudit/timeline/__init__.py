"""pipeaudit.timeline"""

#: Event columns :func:`~pipeaudit.timeline.rank.reduce_rank` reads besides name, cat, ph, ts
#: and dur: threads and launch correlation (CPU and GPU), ``External id`` (pairs an annotation
#: with its GPU copy), the GPU event's process, stream and device, and NCCL's P2P peers and
#: sequence numbers. Here, not in :mod:`~pipeaudit.timeline.build`, so that the CLI can name
#: them before it imports polars.
REDUCE_COLUMNS = ("tid", "pid", "correlation", "external_id", "stream", "device", "src_rank",
                  "dst_rank", "seq")
