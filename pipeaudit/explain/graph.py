"""The cross-rank dependency graph of one measured step.

Nodes are the step's actions with their measured compute span ``[start, end]`` (first to
last compute interval of the action, integer ns on the common clock). Edges:

* ``rank`` edges: each action after the previous action of its rank (the first action of a
  rank after the step start, the window's left edge);
An action that computed nothing (stage 0's input-gradient pass I has no input to
differentiate; torch's runtime still waits for the gradient inside its span) is a point at its
span's end: that is when its input arrived.

* ``data`` edges that cross ranks: F(s, m) after F(s-1, m), B/I(s, m) after B/I(s+1, m)
  (:func:`pipeaudit.audit.deps.producers`). Producers on the same rank (the last stage's own
  F, a V-placement turn, W after its I) already precede the consumer through the rank edges.

Every edge carries its ``observed`` delay: the consumer's compute start minus the producer's
compute end (for a cross-rank edge this is the communication delay the trace shows; for a
rank edge the host/launch gap). The edge whose producer ends last *binds* the action (ties
go to the cross-rank edge): it is the one that set its start.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from pipeaudit.actions import Action
from pipeaudit.audit.deps import producers
from pipeaudit.errors import ScheduleError
from pipeaudit.timeline.model import Timeline

STEP_START = -1  # the source id of a rank's first action's rank edge


@dataclass(frozen=True)
class Node:
    """One measured action: ``rank`` is the trace's rank id, ``rank_index`` its position."""

    id: int
    rank: int
    rank_index: int
    action: Action
    start: int
    end: int
    compute_ns: int

    @property
    def duration(self) -> int:
        """Occupancy: first compute start to last compute end (ns)."""
        return self.end - self.start

    @property
    def label(self) -> str:
        return str(self.action)


@dataclass
class Edge:
    """A dependency ``src -> dst`` (``src`` is ``STEP_START`` for a rank's first action)."""

    src: int
    dst: int
    kind: str  # "rank" | "data"
    observed: int  # dst.start - src.end, ns (may be negative on skewed clocks)
    binding: bool = False
    delay: float = 0.0  # modelled minimal delay, filled by calibration

    @property
    def cross(self) -> bool:
        return self.kind == "data"


@dataclass
class StepGraph:
    """The dependency graph of step ``step`` with its window ``[w0, w1]`` (ns)."""

    step: int
    w0: int
    w1: int
    ranks: list[int]  # pipeline ranks, in rank-index order
    placement: list[int]  # stage -> rank index
    nodes: list[Node]
    edges: list[Edge]
    orders: list[list[int]]  # per rank index, node ids in execution order
    by_action: dict[Action, int] = field(default_factory=dict)
    into: dict[int, list[int]] = field(default_factory=dict)  # node id -> incoming edge ids
    out: dict[int, list[int]] = field(default_factory=dict)  # node id -> outgoing edge ids

    @property
    def step_time(self) -> int:
        return self.w1 - self.w0

    def binding_edge(self, node: int) -> Edge:
        """The incoming edge that set ``node``'s start."""
        return next(self.edges[e] for e in self.into[node] if self.edges[e].binding)

    def last_node(self) -> int:
        """The action that ends last (ties: the later start)."""
        return max(range(len(self.nodes)), key=lambda i: (self.nodes[i].end, self.nodes[i].start))

    def action_orders(self) -> list[list[Action]]:
        """Per rank index, the observed action order (for :func:`pipeaudit.schedules.replay`)."""
        return [[self.nodes[i].action for i in o] for o in self.orders]


def pipeline_layout(tl: Timeline) -> tuple[list[int], list[int]]:
    """(pipeline ranks in order, stage -> rank index); stages must be 0..S-1."""
    placement = tl.placement
    S = len(placement)
    if not S:
        raise ScheduleError("no pipeline actions (PP:, Forward/Backward, or inferable F/B) in "
                            "the traces: no critical path to find")
    if sorted(placement) != list(range(S)):
        raise ScheduleError(f"stages {sorted(placement)} are not 0..{S - 1}: cannot build the "
                            "dependency graph")
    ranks = sorted(set(placement.values()))
    index = {r: i for i, r in enumerate(ranks)}
    return ranks, [index[placement[s]] for s in range(S)]


def build_step_graph(tl: Timeline, step: int) -> StepGraph:
    """The dependency graph of ``step`` with observed delays and binding edges."""
    ranks, place = pipeline_layout(tl)
    S = len(place)
    nodes: list[Node] = []
    orders: list[list[int]] = []
    by_action: dict[Action, int] = {}
    for i, r in enumerate(ranks):
        rt = next(x for x in tl.ranks if x.rank == r)
        a = rt.actions.filter(pl.col("step") == step).sort(["compute_start", "start"])
        order = []
        prev_end = None
        for s, kind, m, sp_end, cs, ce, cn in a.select(
                "stage", "kind", "microbatch", "end", "compute_start", "compute_end",
                "compute_ns").iter_rows():
            act = Action(int(s), str(kind), int(m))
            if not cn:  # nothing computed (stage 0's I): it ends when its span does, and on a
                # device not before the work queued ahead of it on the rank
                cs = ce = sp_end if prev_end is None else max(sp_end, prev_end)
            if act in by_action:
                raise ScheduleError(f"step {step}: {act} runs twice (traces of two runs, or steps "
                                    "not separated by ProfilerStep spans)")
            node = Node(len(nodes), r, i, act, int(cs), int(max(ce, cs)), int(cn))
            prev_end = node.end
            by_action[act] = node.id
            nodes.append(node)
            order.append(node.id)
        orders.append(order)
    if not nodes:
        raise ScheduleError(f"step {step} has no actions")
    busy = [n for n in nodes if n.compute_ns] or nodes
    w0 = min(n.start for n in busy)  # the audit's step window: compute only
    w1 = max(n.end for n in busy)
    for i, n in enumerate(nodes):
        if not n.compute_ns and not w0 <= n.start <= w1:
            t = min(max(n.start, w0), w1)
            nodes[i] = Node(n.id, n.rank, n.rank_index, n.action, t, t, 0)
    edges: list[Edge] = []
    into: dict[int, list[int]] = {n.id: [] for n in nodes}
    out: dict[int, list[int]] = {n.id: [] for n in nodes}

    def add(src: int, dst: int, kind: str, src_end: int) -> None:
        e = Edge(src, dst, kind, nodes[dst].start - src_end)
        into[dst].append(len(edges))
        if src != STEP_START:
            out[src].append(len(edges))
        edges.append(e)

    for order in orders:
        prev = STEP_START
        for nid in order:
            add(prev, nid, "rank", w0 if prev == STEP_START else nodes[prev].end)
            node = nodes[nid]
            for p in producers(node.action, S):
                pid = by_action.get(p)
                if pid is not None and nodes[pid].rank_index != node.rank_index:
                    add(pid, nid, "data", nodes[pid].end)
            prev = nid
    for nid, ins in into.items():
        # the producer that ends last bound the start; a cross-rank producer wins a tie
        best = max(ins, key=lambda e: (nodes[nid].start - edges[e].observed, edges[e].cross))
        edges[best].binding = True
    return StepGraph(step, w0, w1, ranks, place, nodes, edges, orders, by_action, into, out)


def build_graphs(tl: Timeline) -> tuple[list[StepGraph], list[str]]:
    """Graphs of every step that has actions; steps that cannot be built become notes."""
    graphs, notes = [], []
    for k in tl.steps:
        try:
            graphs.append(build_step_graph(tl, k))
        except ScheduleError as exc:
            notes.append(f"step {k}: {exc}")
    return graphs, notes
