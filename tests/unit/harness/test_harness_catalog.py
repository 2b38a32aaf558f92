"""The torch-free constraint table agrees with what torch 2.13 accepts and can run.

Builds every schedule's plan with stand-in stages (no process group) for a grid
of P, v, M, lowers it the way torch's runtime does, and dry-runs the result for
deadlocks; then compares "torch can do it" with ``check_schedule``.
"""

from __future__ import annotations

import logging

import pytest

torch = pytest.importorskip("torch")

from torch.distributed.pipelining import schedules as S  # noqa: E402

from pipeaudit.errors import ConfigError  # noqa: E402
from pipeaudit.harness.build import schedule_class, single_stage_rank_actions  # noqa: E402
from pipeaudit.harness.catalog import SCHEDULES, check_schedule, rank_stages  # noqa: E402

CLASSES = {name: schedule_class(spec.torch_class) for name, spec in SCHEDULES.items()}


def test_every_torch_schedule_of_the_catalogue_is_runnable_by_the_harness():
    from pipeaudit.schedules.catalogue import TORCH_CLASSES

    assert set(TORCH_CLASSES) <= set(SCHEDULES)
    for name, cls in TORCH_CLASSES.items():
        assert CLASSES[name] is getattr(S, cls)


class _StandInStage:
    """Just what the schedule constructors read from a stage."""

    def __init__(self, index: int, num_stages: int, group_size: int, group_rank: int) -> None:
        self.stage_index = index
        self.num_stages = num_stages
        self.group_size = group_size
        self.group_rank = group_rank
        self.submod = torch.nn.Linear(1, 1)
        self.is_first = index == 0
        self.is_last = index == num_stages - 1
        self.stage_index_to_group_rank: dict[int, int] = {}


def _flatten(actions):
    out = []
    for a in actions:
        if a.computation_type == S.OVERLAP_F_B:
            out.extend(a.sub_actions)
        elif a.computation_type in (S.UNSHARD, S.RESHARD, S.REDUCE_GRAD):
            continue
        else:
            out.append(a)
    return out


def _dry_run(order, s2r, num_stages):
    """Execute the lowered per-rank lists; a compute waits for its producer's SEND."""
    order = {r: _flatten(a) for r, a in order.items()}
    done = {r: set() for r in order}
    pos = {r: 0 for r in order}
    A = S._Action

    def ready(r, a):
        t, s, mb = a.computation_type, a.stage_index, a.microbatch_index
        if t == S.F:
            if s == 0:
                return True
            src = s2r[s - 1]
            if src == r:
                return A(s - 1, S.F, mb) in done[r]
            return A(s - 1, S.SEND_F, mb) in done[src] and A(s, S.RECV_F, mb) in done[r]
        if t in (S.I, S.B):
            if A(s, S.F, mb) not in done[r]:
                return False
            if s == num_stages - 1:
                return True
            src = s2r[s + 1]
            if src == r:
                return A(s + 1, S.I, mb) in done[r] or A(s + 1, S.B, mb) in done[r]
            return A(s + 1, S.SEND_B, mb) in done[src] and A(s, S.RECV_B, mb) in done[r]
        return True

    while any(pos[r] < len(order[r]) for r in order):
        progressed = False
        for r in order:
            while pos[r] < len(order[r]) and ready(r, order[r][pos[r]]):
                done[r].add(order[r][pos[r]])
                pos[r] += 1
                progressed = True
        if not progressed:
            raise RuntimeError("deadlock")


def torch_accepts(name: str, p: int, m: int, v: int) -> bool:
    spec = SCHEDULES[name]
    cls = CLASSES[name]
    try:
        sched = None
        for r in range(p):
            stages = [_StandInStage(s, p * v, p, r) for s in rank_stages(spec.placement, p, v, r)]
            if spec.multi_stage:
                sched = cls(stages, m, loss_fn=lambda a, b: a)
            else:
                if len(stages) != 1:
                    return False
                sched = cls(stages[0], m, loss_fn=lambda a, b: a)
        if spec.multi_stage:
            _dry_run(sched.pipeline_order_with_comms, sched.stage_index_to_group_rank, p * v)
        return True
    except (ValueError, RuntimeError, AssertionError):
        return False


def ours_accepts(name: str, p: int, m: int, v: int) -> bool:
    try:
        check_schedule(name, p, m, v)
        return True
    except ConfigError:
        return False


@pytest.fixture(autouse=True)
def _quiet_torch_logs():
    logging.disable(logging.CRITICAL)
    yield
    logging.disable(logging.NOTSET)


@pytest.mark.parametrize("name", list(CLASSES))
def test_constraints_match_torch(name):
    chunks = {"gpipe": [1, 2], "1f1b": [1, 2], "naive": [1, 2],
              "zbv": [1, 2, 3], "dualpipev": [1, 2, 3]}.get(name, [1, 2, 3])
    disagree = []
    for v in chunks:
        for p in range(1, 6):
            for m in range(1, 17):
                if v != 1 and not SCHEDULES[name].multi_stage:
                    # single-stage torch classes take one stage; ours must refuse v != 1
                    assert not ours_accepts(name, p, m, v)
                    continue
                if SCHEDULES[name].placement == "v" and v != 2:
                    assert not ours_accepts(name, p, m, v)
                    continue
                if torch_accepts(name, p, m, v) != ours_accepts(name, p, m, v):
                    disagree.append((p, m, v))
    assert not disagree, f"{name}: catalog and torch disagree on (P, M, v) = {disagree[:10]}"


@pytest.mark.parametrize("p,m", [(1, 3), (2, 4), (4, 8), (4, 4), (3, 7)])
def test_1f1b_plan_matches_torch_step_order(p, m):
    """Our 1F1B/GPipe action lists follow torch's _step_microbatches, per stage."""
    plans = single_stage_rank_actions("1f1b", p, m)
    for s, acts in plans.items():
        warm = min(m, p - s)
        assert acts[:warm] == [f"{s}F{i}" for i in range(warm)]
        assert sorted(a for a in acts if "F" in a) == sorted(f"{s}F{i}" for i in range(m))
        assert [a for a in acts if "B" in a] == [f"{s}B{i}" for i in range(m)]
        # the last stage alternates strictly
        if s == p - 1:
            assert acts[:4] == [f"{s}F0", f"{s}B0", f"{s}F1", f"{s}B1"][: len(acts[:4])]


def test_torch_1f1b_nominal_order_is_wrong_on_last_rank():
    """Why the manifest's 1F1B plan is ours: torch's IR starts the last rank at F1."""
    sched = S.Schedule1F1B(_StandInStage(1, 2, 2, 1), 4, loss_fn=lambda a, b: a)
    first = next(a for a in sched.pipeline_order[1] if a is not None)
    assert str(first) == "1F1"  # if torch fixes this, drop the workaround
