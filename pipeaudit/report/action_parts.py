"""Compute and waiting inside each action, for every picture of a timeline.

An action's span (``start``..``end``) can hold much more than its compute: an un-annotated
forward runs to the end of its send, a recv inside an action waits for the sender. The
reduced timeline keeps each action's merged compute intervals (``RankTimeline.compute``);
the ASCII timeline, the HTML page and the Perfetto export draw those as compute and the
rest of the span as waiting, from :func:`compute_parts` and :func:`waiting_parts`.
"""

from __future__ import annotations

from collections.abc import Iterable

import polars as pl

#: (stage, kind, microbatch, step) of an action
ActionKey = tuple[int, str, int, int | None]


def compute_parts(tl, step: int | None = None) -> dict[ActionKey, list[tuple[int, int]]]:
    """Action -> its compute intervals (ns, sorted), for every action of ``tl`` (of ``step``
    only, when given)."""
    out: dict[ActionKey, list[tuple[int, int]]] = {}
    for rt in tl.ranks:
        a = rt.actions
        if not a.height:
            continue
        keys = list(zip(a["stage"].to_list(), a["kind"].to_list(), a["microbatch"].to_list(),
                        a["step"].to_list()))
        c = rt.compute
        if step is not None:
            ids = [i for i, k in enumerate(keys) if k[3] == step]
            c = c.filter(pl.col("action").is_in(ids))
        for aid, s, e in c.select("action", "start", "end").sort("start").iter_rows():
            out.setdefault(keys[aid], []).append((int(s), int(e)))
    return out


def waiting_parts(start: int, end: int, compute: Iterable[tuple[int, int]],
                  min_ns: int = 0) -> list[tuple[int, int]]:
    """The parts of the span ``start``..``end`` outside its ``compute`` intervals (sorted),
    those shorter than ``min_ns`` left out."""
    out = []
    t = start
    for s, e in sorted(compute):
        s, e = max(s, start), min(e, end)
        if s > t and s - t >= max(min_ns, 1):
            out.append((t, s))
        t = max(t, e)
    if end > t and end - t >= max(min_ns, 1):
        out.append((t, end))
    return out


def coarse(compute: Iterable[tuple[int, int]], min_gap: int) -> list[tuple[int, int]]:
    """``compute`` (sorted) with the gaps shorter than ``min_gap`` closed: what a picture
    ``min_gap`` per pixel can show."""
    out: list[list[int]] = []
    for s, e in compute:
        if out and s - out[-1][1] < min_gap:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]
