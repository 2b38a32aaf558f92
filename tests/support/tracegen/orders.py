"""Per-rank programs (compute actions with their sends and receives) for each schedule.

The multi-stage schedules come from torch's own classes (``torch.distributed.pipelining
.schedules``, the ``_PipelineScheduleRuntime`` family): they are constructed with light stage
stand-ins (no process group), and their ``pipeline_order_with_comms`` is the program every rank
runs. GPipe and 1F1B (``PipelineScheduleSingle``, which have no such program) are written from
their definition: GPipe all forwards then all backwards, 1F1B ``min(M, P - s)`` warm-up forwards
then one backward, one forward, then the remaining backwards; each action receives its input right
before it and sends its output right after it (what their ``_step_microbatches`` do).
"""

from __future__ import annotations

import logging
import types
from dataclasses import dataclass
from functools import lru_cache

#: schedule name (pipeaudit's catalogue names) -> torch class name (None: written here)
TORCH_CLASSES = {
    "gpipe": None,
    "1f1b": None,
    "interleaved-1f1b": "ScheduleInterleaved1F1B",
    "looped-bfs": "ScheduleLoopedBFS",
    "interleaved-zb": "ScheduleInterleavedZeroBubble",
    "zbv": "ScheduleZBVZeroBubble",
    "dualpipev": "ScheduleDualPipeV",
}
SCHEDULES = tuple(TORCH_CLASSES)
V_SHAPED = ("zbv", "dualpipev")


@dataclass(frozen=True)
class Act:
    """One compute action: stage (global), kind F/B/I/W, microbatch."""

    stage: int
    kind: str
    mb: int


@dataclass(frozen=True)
class Item:
    """One entry of a rank's program.

    ``op``: "C" compute (``acts``: one action, or two for DualPipeV's overlapped F;B pair),
    "S" send / "R" receive of ``key`` = (stage that consumes it, "F" or "B", microbatch),
    "X" a bookkeeping action with no compute (UNSHARD, RESHARD, REDUCE_GRAD: ``label``)."""

    op: str
    acts: tuple[Act, ...] = ()
    key: tuple[int, str, int] | None = None
    label: str = ""


def placement(schedule: str, pp: int, v: int) -> dict[int, int]:
    """Stage -> rank: V-shaped (rank r holds r and 2P-1-r) or loop (stage = chunk*P + rank)."""
    if schedule in V_SHAPED:
        return {s: (s if s < pp else 2 * pp - 1 - s) for s in range(2 * pp)}
    return {s: s % pp for s in range(pp * v)}


def valid(schedule: str, pp: int, v: int, m: int) -> bool:
    """Whether torch (or the definition) accepts this (schedule, P, v, M), without building it
    (tests/unit/tracegen holds this rule to torch's own refusals)."""
    if m < 1 or pp < 2:
        return False
    if schedule in ("gpipe", "1f1b"):
        return v == 1
    if schedule == "zbv":
        return v == 2
    if schedule == "dualpipev":  # torch: M >= 2P
        return v == 2 and m >= 2 * pp
    if schedule in ("interleaved-1f1b", "interleaved-zb"):  # M a multiple of the rounds
        return m % max(1, m // pp) == 0
    return schedule == "looped-bfs"


def torch_accepts(schedule: str, pp: int, v: int, m: int) -> bool:
    """Whether building the program succeeds (torch's own check, slow)."""
    try:
        programs(schedule, pp, v, m)
    except ValueError:
        return False
    return True


@lru_cache(maxsize=4096)
def programs(schedule: str, pp: int, v: int, m: int) -> tuple[tuple[Item, ...], ...]:
    """Each rank's program for one step. Raises ValueError where the schedule refuses."""
    if schedule in ("gpipe", "1f1b"):
        if v != 1:
            raise ValueError(f"{schedule} has one stage per rank")
        return tuple(tuple(_single_program(schedule, pp, m, r)) for r in range(pp))
    if schedule in V_SHAPED and v != 2:
        raise ValueError(f"{schedule} has two stages per rank")
    return _torch_programs(schedule, pp, v, m)


def compute_orders(schedule: str, pp: int, v: int, m: int) -> tuple[tuple[Act, ...], ...]:
    """Each rank's compute actions in order (pairs flattened, forward first)."""
    return tuple(tuple(a for it in prog if it.op == "C" for a in it.acts)
                 for prog in programs(schedule, pp, v, m))


def _single_order(schedule: str, pp: int, m: int, s: int) -> list[Act]:
    if schedule == "gpipe":
        return [Act(s, "F", i) for i in range(m)] + [Act(s, "B", i) for i in range(m)]
    warm = min(m, pp - s)
    out = [Act(s, "F", i) for i in range(warm)]
    f, b = warm, 0
    while f < m:
        out += [Act(s, "B", b), Act(s, "F", f)]
        b, f = b + 1, f + 1
    out += [Act(s, "B", i) for i in range(b, m)]
    return out


def _single_program(schedule: str, pp: int, m: int, s: int) -> list[Item]:
    prog: list[Item] = []
    for a in _single_order(schedule, pp, m, s):
        if a.kind == "F" and s > 0:
            prog.append(Item("R", key=(s, "F", a.mb)))
        if a.kind == "B" and s < pp - 1:
            prog.append(Item("R", key=(s, "B", a.mb)))
        prog.append(Item("C", (a,)))
        if a.kind == "F" and s < pp - 1:
            prog.append(Item("S", key=(s + 1, "F", a.mb)))
        if a.kind == "B" and s > 0:
            prog.append(Item("S", key=(s - 1, "B", a.mb)))
    return prog


def _torch_programs(schedule: str, pp: int, v: int, m: int) -> tuple[tuple[Item, ...], ...]:
    from torch.distributed.pipelining import schedules as ts

    logging.getLogger("torch.distributed.pipelining.schedules").setLevel(logging.ERROR)
    cls = getattr(ts, TORCH_CLASSES[schedule])
    n = pp * v
    place = placement(schedule, pp, v)
    local = [s for s in range(n) if place[s] == 0]
    stages = [types.SimpleNamespace(num_stages=n, group_size=pp, group_rank=0, stage_index=s,
                                    is_first=s == 0, is_last=s == n - 1, submod=None)
              for s in local]
    try:
        sched = cls(stages, m, loss_fn=lambda out, tgt: out)
    except (ValueError, AssertionError, RuntimeError) as e:  # torch refuses this (P, v, M)
        raise ValueError(str(e)) from e
    out = []
    for r in range(pp):
        prog = [_item(a, place) for a in sched.pipeline_order_with_comms[r] if a is not None]
        out.append(tuple(prog))
    return tuple(out)


def _item(a, place: dict[int, int]) -> Item:
    t = a.computation_type.name if hasattr(a.computation_type, "name") else str(a.computation_type)
    kinds = {"FORWARD": "F", "FULL_BACKWARD": "B", "BACKWARD_INPUT": "I", "BACKWARD_WEIGHT": "W"}
    if t in kinds:
        return Item("C", (Act(a.stage_index, kinds[t], a.microbatch_index),))
    if t == "OVERLAP_F_B":
        subs = tuple(Act(s.stage_index, kinds[s.computation_type.name], s.microbatch_index)
                     for s in a.sub_actions)
        return Item("C", subs)
    s, mb = a.stage_index, a.microbatch_index
    if t == "SEND_F":
        return Item("S", key=(s + 1, "F", mb))
    if t == "SEND_B":
        return Item("S", key=(s - 1, "B", mb))
    if t == "RECV_F":
        return Item("R", key=(s, "F", mb))
    if t == "RECV_B":
        return Item("R", key=(s, "B", mb))
    return Item("X", label=f"{s}{t}")
