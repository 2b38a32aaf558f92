"""Pipelines from who sends to whom: the layout of a job whose process groups carry no names.

DeepSpeed names none of its groups (``pg_desc: "undefined"``) and lays the pipe dimension
outermost; gloo's CPU traces name no peer on a send or a recv. What every rank's trace does
say is *when* each of its sends started and each of its recvs ended, and what each carried
(the forward's activations or the backward's gradients, from the rank's own actions: see
:mod:`pipeaudit.timeline.p2p_tags`). Rank ``a`` hands its activations to rank ``b`` when

- ``a`` sends as many activations as ``b`` receives, and ``b`` sends as many gradients back as
  ``a`` receives (one stage per rank and position: every microbatch crosses once each way);
- causality holds both ways for every microbatch: the k-th activation send on ``a`` starts
  before the k-th activation recv on ``b`` ends, and the k-th gradient send on ``b`` before the
  k-th gradient recv on ``a`` ends. A rank further down the same pipeline may pass the first
  test; a rank of another replica fails one direction or the other as soon as the replicas
  drift apart by more than a transfer;
- of the ranks that pass, ``a`` is the one whose sends precede ``b``'s recv ends most
  closely (the least median slack).

Where the trace headers list process groups with no names, the transfers choose among them
first: the groups of one shape (size and rank strides) that split the ranks into equal parts
are the pipelines when, in each, every rank hands its activations to the next one listed (the
tests above), and no other family of groups passes. Replicas that run in lockstep pass the
pairwise test across replicas too, so the groups settle what slack alone cannot.

Otherwise pairs are taken greedily by slack, each rank with one downstream and one upstream
peer; following them from the rank that receives no activations (or, in a ring of interleaved
stages, from the rank whose first send comes first) gives each pipeline in stage order.
This reads clocks across ranks, so it is used only when every rank ran on one host.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from pipeaudit.timeline.rank import RankTimeline

#: How many ranks the pairwise test is run on at most (it is quadratic in ranks).
MAX_RANKS = 512


@dataclass(frozen=True)
class _Flows:
    """One rank's transfers by what they carry, in the order they ran."""

    f_send: np.ndarray  #: activation sends' starts
    f_recv: np.ndarray  #: activation recvs' ends
    b_send: np.ndarray  #: gradient sends' starts
    b_recv: np.ndarray  #: gradient recvs' ends


def _flows(rt: RankTimeline) -> _Flows:
    tags = rt.p2p_tags.sort("start")

    def pick(direction: str, kind: str, col: str) -> np.ndarray:
        return tags.filter((pl.col("dir") == direction) & (pl.col("kind") == kind))[col].to_numpy()

    return _Flows(_op_starts(rt, pick("send", "F", "start")), pick("recv", "F", "end"),
                  _op_starts(rt, pick("send", "B", "start")), pick("recv", "B", "end"))


def _op_starts(rt: RankTimeline, starts: np.ndarray) -> np.ndarray:
    """Each send's start as its ``c10d`` op's (the latest op start at or before the instance's;
    gloo's lifetime span may start well after the op, with the data already sent)."""
    ops = rt.send_op_starts
    if ops is None or ops.size == 0 or starts.size == 0:
        return starts
    i = np.searchsorted(ops, starts, side="right") - 1
    return np.where(i >= 0, ops[np.maximum(i, 0)], starts)


def _slack(up: _Flows, down: _Flows) -> float | None:
    """Median time from each send to the matching recv's end, both ways; None when ``up``
    cannot be ``down``'s upstream peer (counts differ or causality fails)."""
    n, m = up.f_send.size, down.b_send.size
    if n == 0 or n != down.f_recv.size or m != up.b_recv.size:
        return None
    fwd = down.f_recv - up.f_send
    bwd = up.b_recv - down.b_send
    if (fwd < 0).any() or (bwd < 0).any():
        return None
    return float(np.median(np.concatenate([fwd, bwd])))


def pipelines_from_peers(ranks: Sequence[RankTimeline],
                         groups: Sequence[Mapping[str, object]] = ()) -> list[tuple[int, ...]] | None:
    """Each pipeline's ranks in stage order, from the point-to-point timing (see the module
    docstring), choosing among ``groups`` (the headers' process groups, each with its
    ``ranks``) first; None when the transfers do not say (a rank without tagged transfers,
    several hosts, pipelines of different lengths, or a rank left out)."""
    if len(ranks) < 2 or len(ranks) > MAX_RANKS:
        return None
    if len({rt.host for rt in ranks}) > 1:
        return None
    flows = {rt.rank: _flows(rt) for rt in ranks}
    if any(f.f_send.size + f.f_recv.size == 0 for f in flows.values()):
        return None
    from_groups = _pipelines_among_groups(flows, groups)
    if from_groups is not None:
        return from_groups
    by_recvs: dict[int, list[int]] = {}
    for b, fb in flows.items():
        by_recvs.setdefault(fb.f_recv.size, []).append(b)
    pairs = []
    for a, fa in flows.items():
        for b in by_recvs.get(fa.f_send.size, []) if fa.f_send.size else []:
            slack = _slack(fa, flows[b]) if a != b else None
            if slack is not None:
                pairs.append((slack, a, b))
    down: dict[int, int] = {}
    up: dict[int, int] = {}
    for _, a, b in sorted(pairs):
        if a not in down and b not in up and not _closes_short_ring(down, a, b):
            down[a], up[b] = b, a
    chains = _chains(flows, down, up)
    valid = {(a, b) for _, a, b in pairs}
    return None if chains is None else sorted((_ring_start(c, valid, flows) for c in chains),
                                              key=lambda c: c[0])


def _pipelines_among_groups(flows: dict[int, _Flows], groups: Sequence[Mapping[str, object]]
                            ) -> list[tuple[int, ...]] | None:
    """The one family of process groups whose every group, in its listed order, is a chain of
    ranks each handing activations to the next; None when no family or several pass."""
    ranks = sorted(flows)
    by_shape: dict[tuple[int, ...], set[tuple[int, ...]]] = {}
    for g in groups:
        members = tuple(g["ranks"])  # type: ignore[arg-type]
        if 1 < len(members) < len(ranks):
            by_shape.setdefault(tuple(r - members[0] for r in members), set()).add(members)
    passing = []
    for family in by_shape.values():
        if sorted(r for g in family for r in g) != ranks:
            continue  # the family does not split the ranks given into parts
        if all(_slack(flows[a], flows[b]) is not None for g in family for a, b in zip(g, g[1:])):
            passing.append(sorted(family, key=lambda g: g[0]))
    return passing[0] if len(passing) == 1 else None


def _ring_start(chain: tuple[int, ...], valid: set[tuple[int, int]],
                flows: dict[int, "_Flows"]) -> tuple[int, ...]:
    """A chain whose last rank also hands activations to its first is a ring (a looped or
    interleaved schedule; at two ranks the greedy pairing cannot tell its direction from
    slack): it starts at the rank whose first activation send comes first, the first stage's."""
    if len(chain) < 2 or (chain[-1], chain[0]) not in valid:
        return chain
    first = min(range(len(chain)), key=lambda i: (flows[chain[i]].f_send[0], chain[i]))
    return chain[first:] + chain[:first]


def _closes_short_ring(down: dict[int, int], a: int, b: int) -> bool:
    """Whether a -> b closes a ring of two (an interleaved ring has at least two ranks, but
    two ranks of one-stage pipelines send both ways: that is one pipeline, not a ring)."""
    return down.get(b) == a


def _chains(flows: dict[int, _Flows], down: dict[int, int], up: dict[int, int]
            ) -> list[tuple[int, ...]] | None:
    seen: set[int] = set()
    out: list[tuple[int, ...]] = []
    starts = [r for r in flows if r not in up]
    for r in sorted(starts):
        chain = [r]
        while chain[-1] in down:
            chain.append(down[chain[-1]])
        out.append(tuple(chain))
        seen.update(chain)
    rest = [r for r in flows if r not in seen]
    while rest:  # rings (interleaved stages): start where the first send comes first
        first = min(rest, key=lambda r: (flows[r].f_send[0] if flows[r].f_send.size else np.inf, r))
        chain = [first]
        while down.get(chain[-1]) not in (None, first):
            chain.append(down[chain[-1]])
        out.append(tuple(chain))
        seen.update(chain)
        rest = [r for r in rest if r not in seen]
    lengths = {len(c) for c in out}
    if len(lengths) != 1 or lengths.pop() < 2:
        return None
    return sorted(out, key=lambda c: c[0])
