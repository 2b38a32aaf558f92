"""Traces as users have them: no annotations, no step marks, one rank's file, missing ranks.

Every run is built with a known answer (``tests/support/builders.py``, ``realistic=True``: actions
made of several ops, bookkeeping ops around them, the batch split at each step's start, the
optimizer's annotated ops), then stripped of what users' traces lack.
"""

from __future__ import annotations

import pytest

import pipeaudit
from tests.support.builders import build_run, gpipe_orders, one_f_one_b_orders
from pipeaudit.timeline.stepping import PERIODICITY_EVIDENCE, SPLIT_EVIDENCE
from pipeaudit.timeline.steps import OPTIMIZER_EVIDENCE, PROFILER_EVIDENCE
from tests.support.paths import SAMPLES

BASE = {"F": 1000, "B": 2000}


def _dur(slow_stage: int | None, factor: float):
    def dur(s, k, m):
        return int(BASE[k] * (factor if s == slow_stage else 1))
    return dur


def _check(result, built, M: int, steps: int, P: int, schedule: str, tol: float = 0.01):
    assert result.num_ranks == P and result.num_microbatches == M and result.num_steps == steps
    assert result.schedule == schedule, (result.schedule, result.notes)
    assert result.bubble.theory is not None
    assert sorted(r.rank for r in result.ranks if r.bubble is not None) == list(range(P))
    for st in result.stages:
        assert st.actions["F"] == M * steps and st.actions["B"] == M * steps, st
    truth = built.true_bubble()
    for r in result.ranks:
        assert r.bubble == pytest.approx(truth[r.rank], abs=tol), (r.rank, r.bubble, truth[r.rank])
    assert not [f for f in result.findings if f.code in ("MISSING_ACTIONS", "DUPLICATED_ACTIONS",
                                                         "NO_ACTIONS_FOUND",
                                                         "SCHEDULE_ORDER_VIOLATION")]


MARKS = {
    "profiler-steps": dict(with_profiler_steps=True, optimizer=True, split_marks=True),
    "optimizer-only": dict(with_profiler_steps=False, optimizer=True, split_marks=True),
    "split-only": dict(with_profiler_steps=False, optimizer=False, split_marks=True),
    "no-marks": dict(with_profiler_steps=False, optimizer=False, split_marks=False),
}
EVIDENCE = {"profiler-steps": PROFILER_EVIDENCE, "optimizer-only": OPTIMIZER_EVIDENCE,
            "split-only": SPLIT_EVIDENCE, "no-marks": PERIODICITY_EVIDENCE}


@pytest.mark.parametrize("marks", sorted(MARKS))
@pytest.mark.parametrize("schedule,P,M,slow,factor,latency", [
    ("1f1b", 4, 8, 0, 4.0, 0),
    ("1f1b", 2, 4, 0, 3.5, 300),
    ("1f1b", 8, 8, 5, 4.0, 1000),     # latency comparable to compute
    ("gpipe", 6, 11, 2, 1.8, 200),
    ("gpipe", 8, 3, 7, 4.0, 0),       # M < P
    ("1f1b", 3, 1, None, 1.0, 500),   # M = 1
])
def test_unannotated_runs(tmp_path, marks, schedule, P, M, slow, factor, latency):
    orders = one_f_one_b_orders(P, M) if schedule == "1f1b" else gpipe_orders(P, M)
    built = build_run(tmp_path, orders, annotate=False, realistic=True, steps=2, latency=latency,
                      dur=_dur(slow, factor), **MARKS[marks])
    result = pipeaudit.load(built.directory).audit()
    assert result.actions_inferred
    expected_schedule = schedule
    if M == 1 and marks == "no-marks":
        # F B F B ... with nothing marking the steps: M = 1 over many steps, or naive with
        # several microbatches a step; the reading says it cannot tell, and a stated M settles it
        assert result.uncertain and result.num_microbatches is None
        assert "alternate one by one" in result.uncertain[0]["reason"]
        result = pipeaudit.load(built.directory, num_microbatches=1).audit()
        assert not result.uncertain
    if M == 1:
        expected_schedule = result.schedule  # GPipe, 1F1B and naive coincide at M = 1
        assert expected_schedule in ("gpipe", "1f1b", "naive")
    _check(result, built, M, 2, P, expected_schedule)
    assert result.step_evidence == ("--microbatches" if M == 1 and marks == "no-marks"
                                    else EVIDENCE[marks])
    assert result.inference_coverage is not None and result.inference_coverage > 0.95


def test_stated_steps_and_microbatches_when_nothing_else_says(tmp_path):
    """Naive's F B F B ... is M = 1 by periodicity, or several microbatches a step: the reading
    cannot tell; --microbatches / --steps settle it."""
    orders = [[(r, k, m) for m in range(4) for k in "FB"] for r in range(2)]
    built = build_run(tmp_path, orders, annotate=False, realistic=True, steps=2,
                      with_profiler_steps=False, optimizer=False, split_marks=False)
    guessed = pipeaudit.load(built.directory).audit()
    assert guessed.uncertain and guessed.num_microbatches is None  # M = 1, or naive over more
    assert "naive" in guessed.uncertain[0]["reason"]
    for kw in ({"num_microbatches": 4}, {"num_steps": 2}):
        result = pipeaudit.load(built.directory, **kw).audit()
        assert result.num_microbatches == 4 and result.num_steps == 2
        assert result.schedule == "naive"
        assert result.step_evidence.startswith("--")


def test_event_order_does_not_matter(tmp_path):
    import json
    import random

    built = build_run(tmp_path, one_f_one_b_orders(4, 8), annotate=False, realistic=True, steps=2,
                      latency=300, dur=_dur(1, 3.0), with_profiler_steps=False)
    rng = random.Random(7)
    for f in built.files:
        doc = json.loads(f.read_text())
        rng.shuffle(doc["traceEvents"])
        f.write_text(json.dumps(doc))
    _check(pipeaudit.load(built.directory).audit(), built, 8, 2, 4, "1f1b")


def test_one_rank_of_four(tmp_path):
    """One rank's file of a 4-rank 1F1B run: P from the job, theory 3/11, the rank's own
    order checked against its own stage's order, its bubble a per-rank figure."""
    built = build_run(tmp_path, one_f_one_b_orders(4, 8), annotate=False, realistic=True, steps=2,
                      latency=200)
    full = pipeaudit.load(built.directory).audit()
    for rank in range(4):
        result = pipeaudit.load(built.files[rank], schedule="1f1b").audit()
        assert result.num_ranks == 4 and result.num_microbatches == 8 and result.num_steps == 2
        assert result.bubble.theory == pytest.approx(3 / 11)
        assert result.ranks_present == [rank] and result.ranks_missing == [r for r in range(4) if r != rank]
        assert not [f for f in result.findings if f.code == "SCHEDULE_ORDER_VIOLATION"]
        assert any(f.code == "MISSING_RANKS" for f in result.findings)
        assert not any(f.code == "BUBBLE_ABOVE_THEORY" for f in result.findings)
        (r,) = result.ranks
        assert r.bubble_scope == "own window" and result.bubble.scope == "own window"
        assert r.position == rank and r.stages == [rank]
        assert result.stages[0].actions == full.stages[rank].actions


def test_a_missing_rank_changes_no_other_rank(tmp_path):
    """With one rank of four left out, P stays 4 and the others' own figures stay theirs."""
    built = build_run(tmp_path, one_f_one_b_orders(4, 8), steps=2, latency=300,
                      host_delay=lambda r: 900 if r == 2 else 0)
    full = pipeaudit.load(built.directory).audit()
    part = pipeaudit.load([str(f) for f in built.files if not f.name.startswith("rank1")],
                          allow_missing=True).audit()
    assert part.num_ranks == 4 and part.num_stages == 4 and part.ranks_missing == [1]
    by = {r.rank: r for r in full.ranks}
    for r in part.ranks:
        assert r.compute_us == pytest.approx(by[r.rank].compute_us)
        assert r.stages == by[r.rank].stages
    strag = {f.rank: f.measured for f in full.findings if f.code == "STRAGGLER_RANK"}
    strag_part = {f.rank: f.measured for f in part.findings if f.code == "STRAGGLER_RANK"}
    for rank, value in strag_part.items():
        assert value <= strag.get(rank, value) + 1e-6


def test_rank_without_actions_is_named_and_p_does_not_shrink(tmp_path):
    built = build_run(tmp_path, one_f_one_b_orders(2, 4), annotate=False, realistic=True, steps=2)
    import json

    doc = json.loads(built.files[0].read_text())
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not e["name"].startswith(("c10d::", "gloo:"))]
    built.files[0].write_text(json.dumps(doc))
    result = pipeaudit.load(built.directory).audit()
    assert result.num_ranks == 2
    assert [f.rank for f in result.findings if f.code == "NO_ACTIONS_FOUND"] == [0]


@pytest.mark.parametrize("marks", ["profiler-steps", "no-marks"])
def test_consecutive_forwards_with_nothing_between(tmp_path, marks):
    """Recvs posted together before a run of forwards: the forwards follow each other with no
    op between them (and the last stage's first backward right after), yet each is one F."""
    built = build_run(tmp_path, gpipe_orders(4, 6), annotate=False, realistic=True, steps=2,
                      latency=400, dur=_dur(3, 2.5), batched_recvs=True, **MARKS[marks])
    result = pipeaudit.load(built.directory).audit()
    _check(result, built, 6, 2, 4, "gpipe")


def _bare_copy(src, dst, drop=()):
    """The rank files of a sample run without its manifest (as users share them), less the
    events whose names start with ``drop``."""
    import gzip
    import json

    dst.mkdir(parents=True)
    for f in sorted(src.glob("rank*.json.gz")):
        doc = json.loads(gzip.decompress(f.read_bytes()))
        doc["traceEvents"] = [e for e in doc["traceEvents"]
                              if not str(e.get("name", "")).startswith(tuple(drop) or ("\0",))]
        (dst / f.name).write_bytes(gzip.compress(json.dumps(doc).encode()))
    return dst


@pytest.mark.parametrize("drop,evidence", [
    ((), OPTIMIZER_EVIDENCE),
    (("Optimizer.",), SPLIT_EVIDENCE),
    (("Optimizer.", "aten::tensor_split"), PERIODICITY_EVIDENCE),
])
@pytest.mark.parametrize("sample,schedule", [("1f1b_p4_m8_noannot_nosteps", "1f1b"),
                                             ("gpipe_p4_m8_noannot_nosteps", "gpipe")])
def test_torch_schedules_profiled_without_step_marks(tmp_path, sample, schedule, drop, evidence):
    """Real runs of torch's own Schedule1F1B / ScheduleGPipe, no PP: annotation and no
    prof.step(), no manifest and no option: M, 2 steps, the schedule and its theory."""
    run_dir = _bare_copy(SAMPLES / sample, tmp_path / "run", drop)
    result = pipeaudit.load(run_dir).audit()
    assert (result.num_ranks, result.num_microbatches, result.num_steps) == (4, 8, 2)
    assert result.schedule == schedule and result.schedule_source == "detected"
    assert result.bubble.theory == pytest.approx(3 / 11)
    if schedule == "gpipe":  # torch's Forward i / Backward i spans: actions by k-th occurrence
        assert result.step_evidence in (evidence, "the k-th occurrence of each annotated action")
    else:
        assert result.step_evidence == evidence
    for st in result.stages:
        assert st.actions["F"] == 16 and st.actions["B"] == 16
    assert not [f for f in result.findings if f.code in ("MISSING_ACTIONS", "DUPLICATED_ACTIONS",
                                                         "SCHEDULE_ORDER_VIOLATION", "NO_ACTIONS_FOUND")]


def test_one_real_rank_file_of_a_four_rank_run():
    result = pipeaudit.load(SAMPLES / "1f1b_p4_m8" / "rank1.json.gz").audit()
    assert result.num_ranks == 4 and result.bubble.theory == pytest.approx(3 / 11)
    assert result.ranks_present == [1] and result.ranks_missing == [0, 2, 3]
    assert not [f for f in result.findings if f.code == "SCHEDULE_ORDER_VIOLATION"]
    assert result.to_dict()["num_ranks"] == 4


def test_every_command_says_what_it_does_with_ranks_missing(tmp_path):
    """explain and whatif need every rank (one line, exit 2); export, plot and gate work on
    the ranks present and say so in one line."""
    import subprocess
    import sys

    one = str(SAMPLES / "1f1b_p4_m8" / "rank1.json.gz")

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "pipeaudit", *args], capture_output=True,
                              text=True)

    for cmd in (["explain", one], ["whatif", one, "--scale", "1=0.5"]):
        proc = cli(*cmd)
        assert proc.returncode == 2 and proc.stdout == ""
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "needs every rank" in lines[0] and "ranks 0, 2-3 of 4" in lines[0]
    for cmd, word in ((["export", one, "--perfetto", str(tmp_path / "p.json")], "export"),
                      (["plot", one, "-o", str(tmp_path / "p.png")], "plot"),
                      (["gate", one, "--max-bubble", "0.99", "--no-config"], "gate")):
        proc = cli(*cmd)
        assert proc.returncode == 0, proc.stderr
        notes = [ln for ln in proc.stderr.splitlines() if "have no trace" in ln]
        assert len(notes) == 1 and word in notes[0], proc.stderr


@pytest.mark.parametrize("schedule,P,M,slow,latency", [
    ("1f1b", 2, 2, None, 0),  # one backward is 4 repeats of a block's: not 4 backwards
    ("1f1b", 4, 4, 1, 600),
    ("gpipe", 4, 3, 3, 200),  # M < P
])
@pytest.mark.parametrize("marks", ["optimizer-only", "no-marks"])
def test_stages_of_repeated_blocks(tmp_path, marks, schedule, P, M, slow, latency):
    """A stage of 4 blocks alike, op for op (a transformer's layers): each forward and each
    backward is one sequence repeated 4 times, yet it is one F and one B."""
    orders = (one_f_one_b_orders if schedule == "1f1b" else gpipe_orders)(P, M)
    built = build_run(tmp_path, orders, annotate=False, realistic=True, steps=2, layers=4,
                      latency=latency, dur=_dur(slow, 2.5), **MARKS[marks])
    _check(pipeaudit.load(built.directory).audit(), built, M, 2, P, schedule)


def test_steps_of_an_unknown_order_without_marks_are_not_guessed(tmp_path):
    """Two steps of an order no catalogue schedule runs (F F B B F B on the first stage), nothing
    marking the steps: the whole trace as one step would give M twice the truth, so the reading
    says it cannot tell; --steps settles it."""
    first = [(0, "F", 0), (0, "F", 1), (0, "B", 0), (0, "B", 1), (0, "F", 2), (0, "B", 2)]
    last = [(1, k, m) for m in range(3) for k in "FB"]
    built = build_run(tmp_path, [first, last], annotate=False, realistic=True, steps=2,
                      with_profiler_steps=False, optimizer=False, split_marks=False)
    guessed = pipeaudit.load(built.directory).audit()
    assert guessed.uncertain and guessed.num_microbatches is None
    assert "repeats itself" in guessed.uncertain[0]["reason"]
    stated = pipeaudit.load(built.directory, num_steps=2).audit()
    assert not stated.uncertain and stated.num_microbatches == 3 and stated.num_steps == 2
