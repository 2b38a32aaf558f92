"""Clocks: how every rank's events end up on one absolute nanosecond axis.

What the files say
    * Kineto writes ``ts`` in microseconds, as text with up to three decimals.
    * Newer Kineto writes ``baseTimeNanoseconds`` (B) in the header and every ``ts``
      relative to it: the wall-clock time of an event is ``B + ts * 1000`` ns since the Unix
      epoch. B is a whole second some weeks before the run, so relative ``ts`` are still large
      (about 4.4e12 µs); we checked on torch 2.13 that B + ts equals ``time.time_ns()`` at the
      profiled moment. (Kineto clamps a time that would fall before B to ``ts`` 0.)
    * Older traces have no B; their ``ts`` are microseconds since the epoch (B = 0).

What pipeaudit does
    * ``events.ts`` = B + exact ns of ``ts`` (see :mod:`pipeaudit.trace.timestamps`): the
      wall-clock time in ns since the epoch, for every rank and for CPU and GPU events alike
      (Kineto converts GPU activity timestamps to the host clock before writing them).
    * Ranks on one host therefore share one clock exactly. Ranks on different hosts differ by
      their hosts' clock offset (NTP: usually well below a millisecond in a data centre). No
      skew is estimated or corrected (a trace holds no reliable synchronisation event); when
      the ranks name more than one ``host_name``, the trace set says so in a warning.
    * A rank whose times do not fall between the years 2000 and 2100 is not on the wall
      clock (a trace written with a monotonic clock and no base): in a set of several ranks a
      warning says that its times are only comparable with ranks of the same host.
    * :attr:`TraceSet.origin_ns` (earliest event of any rank) is the common zero for display.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence

from pipeaudit.trace.model import RankTrace

EPOCH_MIN_NS = 946_684_800 * 10**9  # 2000-01-01T00:00:00Z
EPOCH_MAX_NS = 4_102_444_800 * 10**9  # 2100-01-01T00:00:00Z


def is_wall_clock(rt: RankTrace) -> bool | None:
    """True if the rank's times are wall-clock ns since the epoch; None without events."""
    start, end = rt.start_ns, rt.end_ns
    if start is None or end is None:
        return None
    return EPOCH_MIN_NS <= start and end < EPOCH_MAX_NS


def format_ns(ns: int) -> str:
    """UTC wall-clock text of an absolute ns time, to the ms."""
    t = _dt.datetime.fromtimestamp(ns / 1e9, tz=_dt.timezone.utc)
    return t.strftime("%Y-%m-%d %H:%M:%S.") + f"{t.microsecond // 1000:03d} UTC"


def format_duration(ns: int) -> str:
    s = ns / 1e9
    if s < 120:
        return f"{s:.1f} s"
    if s < 5400:
        return f"{s / 60:.1f} min"
    if s < 2 * 86400:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} days"


def clock_warnings(ranks: Sequence[RankTrace]) -> list[str]:
    """Warnings about clocks that make cross-rank times less trustworthy."""
    out: list[str] = []
    if len(ranks) < 2:
        return out  # one rank: nothing to compare across
    not_wall = [rt for rt in ranks if is_wall_clock(rt) is False]
    for rt in not_wall:
        out.append(
            f"rank {rt.rank} ({rt.path.name}): timestamps are not wall-clock times (no "
            "baseTimeNanoseconds and ts not since the epoch); they are comparable only with "
            "ranks that ran on the same host"
        )
    hosts = sorted({rt.host for rt in ranks if rt.host})
    if len(hosts) > 1:
        shown = ", ".join(hosts[:4]) + (f" and {len(hosts) - 4} more" if len(hosts) > 4 else "")
        out.append(
            f"ranks ran on {len(hosts)} hosts ({shown}): their clocks are assumed synchronised "
            "(NTP); clock skew between hosts is not corrected"
        )
    return out


def time_clusters(ranks: Sequence[RankTrace]) -> list[tuple[int, int, list[int]]]:
    """Group ranks whose [start, end] overlap (transitively): ``(start, end, ranks)`` each,
    in time order. Ranks without events are left out."""
    spans = sorted(
        (rt.start_ns, rt.end_ns, rt.rank) for rt in ranks if rt.start_ns is not None
    )
    clusters: list[tuple[int, int, list[int]]] = []
    for start, end, rank in spans:
        if clusters and start <= clusters[-1][1]:
            s0, e0, rs = clusters[-1]
            clusters[-1] = (s0, max(e0, end), rs + [rank])
        else:
            clusters.append((start, end, [rank]))
    return clusters
