"""Critical path and slack of one measured step.

The critical path is found by walking back from the action that ends last: at each action
take the incoming edge that bound its start (the predecessor that ends last, see
:mod:`pipeaudit.explain.graph`) until a rank's first action after the step start. The path
covers the step window without holes, so its compute, communication (waits on cross-rank
edges) and host/launch gaps (waits on same-rank edges) add up to the step time.

Slack is the latest start of an action that does not delay the step minus its measured
start, from a backward pass over the graph with the measured durations and the modelled
edge delays (:func:`pipeaudit.explain.calibrate.fill_delays`): zero on the critical path.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from graphlib import TopologicalSorter

from pipeaudit.explain.graph import STEP_START, StepGraph

US = 1000.0
COMPUTE, COMM, HOST = "compute", "communication", "host gap"


@dataclass(frozen=True)
class PathItem:
    """One piece of the critical path: an action's compute or the wait before it.

    ``rank/stage/kind/microbatch`` name the action (for a wait: the action that waited);
    ``after`` names what the wait was for (``"3B5 on rank 3"``, ``"2F4"`` on the same rank,
    or ``"step start"``); times are µs from the step window's start.
    """

    rank: int
    stage: int
    kind: str
    microbatch: int
    start_us: float
    end_us: float
    what: str  # compute | communication | host gap
    after: str | None = None

    @property
    def duration_us(self) -> float:
        return self.end_us - self.start_us

    @property
    def label(self) -> str:
        return f"{self.stage}{self.kind}{self.microbatch}"


@dataclass(frozen=True)
class Slack:
    """How late an action could have started without delaying the step (µs)."""

    rank: int
    stage: int
    kind: str
    microbatch: int
    start_us: float
    slack_us: float


@dataclass
class CriticalPath:
    """The critical path of one step, its composition, and every action's slack."""

    step: int
    step_time_us: float
    items: list[PathItem]
    compute_us: float
    comm_us: float
    other_us: float
    slack: list[Slack] = field(default_factory=list)
    window_start_ns: int = 0  # the step window's start on the trace clock

    @property
    def compute_share(self) -> float:
        return self.compute_us / self.step_time_us if self.step_time_us > 0 else 0.0

    @property
    def comm_share(self) -> float:
        return self.comm_us / self.step_time_us if self.step_time_us > 0 else 0.0

    @property
    def other_share(self) -> float:
        return self.other_us / self.step_time_us if self.step_time_us > 0 else 0.0

    def actions(self) -> list[PathItem]:
        """The compute items of the path, in time order."""
        return [i for i in self.items if i.what == COMPUTE]

    def to_dict(self) -> dict:
        return {
            "step": self.step, "step_time_us": self.step_time_us,
            "compute_share": self.compute_share, "comm_share": self.comm_share,
            "other_share": self.other_share, "compute_us": self.compute_us,
            "comm_us": self.comm_us, "other_us": self.other_us,
            "critical_path": [asdict(i) for i in self.items],
            "slack": [asdict(s) for s in self.slack],
        }


def walk_critical_path(g: StepGraph) -> list[PathItem]:
    """The chain of actions and waits that sets the step time, in time order."""
    items: list[PathItem] = []
    nid = g.last_node()
    while True:
        n = g.nodes[nid]
        e = g.binding_edge(nid)
        src_end = g.w0 if e.src == STEP_START else g.nodes[e.src].end
        a = n.action
        begin = max(n.start, src_end)  # an overlap with the predecessor is not counted twice
        items.append(PathItem(n.rank, a.stage, a.kind, a.microbatch, (begin - g.w0) / US,
                              (max(n.end, begin) - g.w0) / US, COMPUTE))
        if n.start > src_end:
            if e.src == STEP_START:
                after = "step start"
            else:
                p = g.nodes[e.src]
                after = f"{p.label} on rank {p.rank}" if e.cross else p.label
            items.append(PathItem(n.rank, a.stage, a.kind, a.microbatch, (src_end - g.w0) / US,
                                  (n.start - g.w0) / US, COMM if e.cross else HOST, after))
        if e.src == STEP_START:
            break
        nid = e.src
    items.reverse()
    return items


def slack(g: StepGraph) -> list[Slack]:
    """Per action, latest start without delaying the step minus measured start (µs).

    Needs the modelled delays (``Edge.delay``) filled in."""
    ts = TopologicalSorter({n.id: [g.edges[e].src for e in g.into[n.id]
                                   if g.edges[e].src != STEP_START] for n in g.nodes})
    order = list(ts.static_order())
    # times relative to the window start: absolute ns do not fit a float exactly
    latest_start: dict[int, float] = {}
    for nid in reversed(order):
        n = g.nodes[nid]
        lf = float(g.w1 - g.w0)
        for eid in g.out[nid]:
            e = g.edges[eid]
            lf = min(lf, latest_start[e.dst] - e.delay)
        latest_start[nid] = lf - n.duration
    out = []
    for n in sorted(g.nodes, key=lambda x: (x.rank_index, x.start)):
        a = n.action
        out.append(Slack(n.rank, a.stage, a.kind, a.microbatch, (n.start - g.w0) / US,
                         max(0.0, latest_start[n.id] - (n.start - g.w0)) / US))
    return out


def path_of(g: StepGraph) -> CriticalPath:
    """Critical path, composition and slack of a graph whose delays are filled in."""
    items = walk_critical_path(g)
    parts = {COMPUTE: 0.0, COMM: 0.0, HOST: 0.0}
    for i in items:
        parts[i.what] += i.duration_us
    return CriticalPath(g.step, g.step_time / US, items, parts[COMPUTE], parts[COMM], parts[HOST],
                        slack(g), g.w0)
