"""The catalogue order of every torch-backed schedule equals what torch 2.13 *executes*.

Each torch schedule is run for real, rank by rank, with stand-in stage objects that do no
compute and no communication: torch's own ``_step_microbatches`` loop runs, and we record the
``record_function`` names it opens (``PP:2F0``, ``PP:1SEND_B3``, ``PP:(0F3;3B1)OVERLAP_F_B``,
GPipe's ``Forward i``) or, for Schedule1F1B which opens none, the forward/backward calls.
Those per-rank name lists go through :func:`compare_names_to_catalogue`, the same helper that
checks real harness traces (see ``check_trace_names`` below).
"""

from __future__ import annotations

import contextlib

import pytest

from pipeaudit.errors import ScheduleError
from pipeaudit.schedules import build_schedule, canonical_name, compare_names_to_catalogue, v_placement
from pipeaudit.schedules.catalogue import HARNESS, config_problem

S = pytest.importorskip("torch.distributed.pipelining.schedules")


def check_trace_names(names_by_rank, schedule, num_microbatches, chunks=None):
    """Assert that per-rank profiler names (execution order) ran catalogue ``schedule``.

    Reusable for harness traces: pass each rank's ``PP:...`` (or GPipe ``Forward i``) span
    names sorted by start time; communication and FSDP names are skipped.
    """
    diffs = compare_names_to_catalogue(names_by_rank, schedule, num_microbatches, chunks)
    assert diffs == [], "\n".join(diffs)


class FakeStage:
    """Enough of ``_PipelineStageBase`` for torch's schedule loops; records compute calls."""

    def __init__(self, stage_index: int, num_stages: int, group_size: int, group_rank: int,
                 log: list[str]):
        self.stage_index = stage_index
        self.num_stages = num_stages
        self.group_size = group_size
        self.group_rank = group_rank
        self.is_first = stage_index == 0
        self.is_last = stage_index == num_stages - 1
        self.device = "cpu"
        self.submod = None
        self.stage_index_to_group_rank = None
        self.has_backward = False
        self.args_recv_info = {0: ()}  # no recv sources/send targets: passes the adjacency check
        self.act_send_info = {}
        self.log = log

    # initialisation and communication: nothing to do
    def _get_init_p2p_neighbors_ops(self):
        return []

    def _prepare_forward_infra(self, *args, **kwargs):
        return None

    def _prepare_backward_infra(self, *args, **kwargs):
        return None

    def get_fwd_recv_ops(self, mb):
        return []

    get_fwd_send_ops = get_bwd_recv_ops = get_bwd_send_ops = get_fwd_recv_ops

    def clear_runtime_states(self):
        pass

    def perform_reduce_grad(self, *args):
        pass

    def set_local_fwd_input(self, output, mb):
        pass

    def set_local_bwd_input(self, grad, mb):
        pass

    def get_local_bwd_output(self, mb):
        return None

    # compute: record
    def forward_one_chunk(self, mb, *args, **kwargs):
        self.log.append(f"call:{self.stage_index}F{mb}")

    def backward_one_chunk(self, mb, loss=None, full_backward=True, last_backward=False):
        self.log.append(f"call:{self.stage_index}{'B' if full_backward else 'I'}{mb}")

    def backward_weight_one_chunk(self, mb, last_backward=False):
        self.log.append(f"call:{self.stage_index}W{mb}")


@pytest.fixture
def recorded(monkeypatch):
    """Replace torch's record_function in the schedules module by a recorder."""
    log: list[str] = []

    @contextlib.contextmanager
    def record_function(name):
        log.append(name)
        yield

    monkeypatch.setattr(S, "record_function", record_function)
    return log


def run_torch(cls, P: int, M: int, stages_of_rank, log: list[str]) -> list[list[str]] | None:
    """Run ``cls`` on every rank; per-rank names it opened (compute calls for 1F1B).
    None if torch refuses the configuration."""
    out = []
    num_stages = sum(len(stages_of_rank(r)) for r in range(P))
    for rank in range(P):
        log.clear()
        stages = [FakeStage(s, num_stages, P, rank, log) for s in stages_of_rank(rank)]
        try:
            sched = cls(stages[0], M) if issubclass(cls, S.PipelineScheduleSingle) else cls(stages, M)
        except (ValueError, AssertionError):
            return None
        sched._step_microbatches()
        names = [x for x in log if not x.startswith("call:")]
        if not names:  # Schedule1F1B opens no record_function: use the compute calls
            names = [x[len("call:"):] for x in log]
        out.append(list(names))
    return out


def loop_stages(P, v):
    return lambda r: list(range(r, P * v, P))


def v_stages(P):
    place = v_placement(P)
    return lambda r: [s for s, rr in enumerate(place) if rr == r]


CASES = [
    ("gpipe", S.ScheduleGPipe, (1,)),
    ("1f1b", S.Schedule1F1B, (1,)),
    ("interleaved-1f1b", S.ScheduleInterleaved1F1B, (1, 2, 3)),
    ("looped-bfs", S.ScheduleLoopedBFS, (1, 2, 3)),
    ("interleaved-zb", S.ScheduleInterleavedZeroBubble, (1, 2, 3)),
    ("zbv", S.ScheduleZBVZeroBubble, (2,)),
    ("dualpipev", S.ScheduleDualPipeV, (2,)),
]


@pytest.mark.parametrize("name,cls,chunk_options", CASES, ids=[c[0] for c in CASES])
def test_catalogue_equals_what_torch_executes(recorded, name, cls, chunk_options):
    compared = refused = 0
    for P in range(1, 5):
        for M in range(1, 3 * P + 3):
            for v in chunk_options:
                stages_of_rank = v_stages(P) if name in ("zbv", "dualpipev") else loop_stages(P, v)
                names = run_torch(cls, P, M, stages_of_rank, recorded)
                try:
                    build_schedule(name, P, M, v)
                    problem = config_problem(canonical_name(name), P, M, v, HARNESS)
                    if problem:  # a constraint of torch's class alone (1F1B's M >= P)
                        raise ScheduleError(problem)
                except ScheduleError:
                    # we refuse exactly what torch refuses
                    assert names is None, f"{name} P={P} M={M} v={v}: torch runs it, we refuse"
                    refused += 1
                    continue
                assert names is not None, f"{name} P={P} M={M} v={v}: torch refuses it"
                check_trace_names(names, name, M, v)
                compared += 1
    assert compared >= 20


def test_runtime_names_include_comms_and_overlap(recorded):
    """What a dualpipev trace looks like: comm names are skipped, overlaps expand F then B."""
    names = run_torch(S.ScheduleDualPipeV, 2, 4, v_stages(2), recorded)
    flat = [n for rank in names for n in rank]
    assert any("OVERLAP_F_B" in n for n in flat)
    assert any("SEND_F" in n for n in flat) and any("RECV_B" in n for n in flat)
    check_trace_names(names, "dualpipev", 4)


def test_gpipe_names_are_forward_backward_spans(recorded):
    names = run_torch(S.ScheduleGPipe, 2, 3, loop_stages(2, 1), recorded)
    assert names[1] == ["Forward 0", "Forward 1", "Forward 2", "Backward 0", "Backward 1", "Backward 2"]


def test_torch_1f1b_ir_is_off_by_one_on_the_last_rank():
    """torch's Schedule1F1B._get_pipeline_order (the IR, not what runs) starts the last rank
    at microbatch 1 and invents microbatch M; the executed order (checked above) does not."""
    stage = FakeStage(3, 4, 4, 3, [])
    ir = S.Schedule1F1B(stage, 8).pipeline_order[3]
    names = [str(a) for a in ir if a is not None and a.is_compute_op]
    assert names[0] == "3F1" and "3F8" in names
    catalogue = [str(a) for a in build_schedule("1f1b", 4, 8).orders[3]]
    assert catalogue[0] == "3F0" and "3F8" not in catalogue


def test_helper_reports_a_wrong_trace():
    good = [[f"PP:{a}" for a in o] for o in build_schedule("1f1b", 2, 2).orders]
    bad = [list(good[0]), list(reversed(good[1]))]
    diffs = compare_names_to_catalogue(bad, "1f1b", 2)
    assert len(diffs) == 1 and diffs[0].startswith("rank 1: position 0: expected 1F0, observed 1B1")
    with pytest.raises(AssertionError):
        check_trace_names(bad, "1f1b", 2)
