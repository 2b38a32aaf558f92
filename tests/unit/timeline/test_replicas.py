"""Jobs of several pipeline replicas: data parallel (x tensor parallel) x pipeline.

Built with a known answer (``tests/support/builders.py``, ``build_replicas``): D copies of one
pipeline run side by side, relabelled as a DeviceMesh ("pp", "dp", "tp") lays ranks out, with
the ``pg_config`` groups torch writes, and a data-parallel all-reduce after each rank's last
backward that waits for the slowest replica.
"""

from __future__ import annotations

import pytest

import pipeaudit
from tests.support.builders import build_replicas, gpipe_orders, one_f_one_b_orders

BASE = {"F": 1000, "B": 2000}


def _dur(factor=1.0, stage=None):
    return lambda s, k, m: int(BASE[k] * (factor if stage is None or s == stage else 1))


def _check_replicas(result, built, P, dp, M, steps=2, tol=0.005):
    assert result.num_ranks == P and result.num_microbatches == M and result.num_steps == steps
    assert result.layout["pp"] == P and result.layout["dp"] == dp
    assert len(result.pipelines) == dp
    for st in result.stages:
        assert st.actions["F"] == M * steps and st.actions["B"] == M * steps
    assert not [f for f in result.findings if f.code in ("DUPLICATED_ACTIONS", "MISSING_ACTIONS",
                                                         "SCHEDULE_ORDER_VIOLATION")]
    truth = built.true_bubble(built.replica_groups())
    for r in result.ranks:
        assert r.bubble == pytest.approx(truth[r.rank], abs=tol), (r.rank, r.bubble, truth[r.rank])
        assert r.replay_bubble is not None


@pytest.mark.parametrize("dp", [2, 4])
def test_replicas_found_from_pg_config(tmp_path, dp):
    built = build_replicas(tmp_path, one_f_one_b_orders(4, 8), dp=dp, latency=200)
    result = pipeaudit.load(built.directory).audit()
    assert result.layout["source"] == "pg_config"
    assert [p.ranks for p in result.pipelines] == built.replica_groups()
    _check_replicas(result, built, 4, dp, 8)
    assert result.schedule == "1f1b" and result.schedule_source == "detected"
    assert result.bubble.theory == pytest.approx(3 / 11)


def test_slower_replica_holds_the_job_back(tmp_path):
    built = build_replicas(tmp_path, one_f_one_b_orders(4, 8), dp=2, latency=100,
                           dur_of=lambda d, t: _dur(1.6 if d == 1 else 1.0))
    result = pipeaudit.load(built.directory).audit()
    _check_replicas(result, built, 4, 2, 8)
    assert result.job["slowest_pipeline"] == 1
    times = {p.pipeline: p.step_time_us for p in result.pipelines}
    assert result.job["spread"] == pytest.approx((times[1] - times[0]) / times[0])
    assert result.job["step_time_us"] == pytest.approx(times[1])
    slow = [f for f in result.findings if f.code == "SLOW_PIPELINE_REPLICA"]
    assert len(slow) == 1 and "replica 1" in slow[0].message
    peers = {f.rank for f in result.findings if f.code == "SLOWER_THAN_PEERS"}
    assert peers == set(built.replica_groups()[1])


def test_straggler_rank_against_its_peers(tmp_path):
    """Replica 2's stage 1 runs 1.5x slower: that rank, and only it, is slower than its peers."""
    built = build_replicas(tmp_path, gpipe_orders(4, 6), dp=4, latency=100,
                           dur_of=lambda d, t: _dur(1.5, stage=1) if d == 2 else _dur())
    result = pipeaudit.load(built.directory).audit()
    _check_replicas(result, built, 4, 4, 6)
    slow_rank = 1 * 4 + 2  # stage 1 of replica 2, pp outermost
    assert {f.rank for f in result.findings if f.code == "SLOWER_THAN_PEERS"} == {slow_rank}
    assert result.job["slowest_pipeline"] == 2


def test_layout_without_pg_config(tmp_path):
    """No process groups in the traces: annotated stage ids say which ranks are replicas; a
    --layout states it, and must match the process groups where there are some."""
    built = build_replicas(tmp_path, one_f_one_b_orders(2, 4), dp=2, pg_config=False)
    result = pipeaudit.load(built.directory).audit()
    assert result.layout["source"] == "stage ids in the annotations"
    _check_replicas(result, built, 2, 2, 4)
    stated = pipeaudit.load(built.directory, layout="pp=2,dp=2").audit()
    assert stated.layout["source"] == "--layout"
    _check_replicas(stated, built, 2, 2, 4)


def test_layout_contradicting_the_traces_is_an_error(tmp_path):
    from pipeaudit.errors import ConfigError

    built = build_replicas(tmp_path, one_f_one_b_orders(2, 4), dp=2)
    with pytest.raises(ConfigError, match="does not match"):
        pipeaudit.load(built.directory, layout="dp=2,pp=2").audit()


def test_tensor_parallel_peers(tmp_path):
    """pp=2 x dp=2 x tp=2: each stage has two ranks; counts per stage are M per step."""
    built = build_replicas(tmp_path, one_f_one_b_orders(2, 4), dp=2, tp=2, latency=100)
    result = pipeaudit.load(built.directory).audit()
    assert result.layout["tp"] == 2 and result.layout["dp"] == 2
    assert len(result.ranks) == 8
    _check_replicas(result, built, 2, 2, 4)


def test_data_parallel_communication(tmp_path):
    """The all-reduce after the last backward: its time, the part waiting for the slowest
    replica (exact: built so), and the step split that adds up to each rank's span."""
    built = build_replicas(tmp_path, one_f_one_b_orders(4, 8), dp=2, latency=100, allreduce_us=300,
                           dur_of=lambda d, t: _dur(1.3 if d == 0 else 1.0))
    result = pipeaudit.load(built.directory).audit()
    for r in result.ranks:
        truth = built.extra["allreduce"][r.rank]
        assert r.dp_wait_us == pytest.approx(sum(w for _, _, w in truth) / len(truth), abs=1.0)
        b = r.breakdown
        assert b["dp_comm_us"] == pytest.approx(sum(e - s for s, e, _ in truth) / len(truth), abs=1.0)
        assert b["compute_us"] + b["bubble_us"] + b["exposed_p2p_us"] + b["exposed_dp_us"] == \
            pytest.approx(b["span_us"], abs=0.01)
        assert b["exposed_dp_us"] == pytest.approx(b["dp_comm_us"], abs=1.0)  # after the compute
    fast = [r for r in result.ranks if r.pipeline == 1]
    assert all(r.dp_wait_us > 0 for r in fast)  # replica 1 waits for the slower replica 0
    job = result.job["breakdown"]
    assert job["dp_wait_us"] > 0 and job["exposed_dp_us"] > 0


def test_python_api_per_replica(tmp_path):
    built = build_replicas(tmp_path, one_f_one_b_orders(2, 4), dp=2,
                           dur_of=lambda d, t: _dur(1.4 if d == 1 else 1.0))
    run = pipeaudit.load(built.directory)
    table = run.pipelines()
    assert table.height == 2 and table["pipeline"].to_list() == [0, 1]
    one = run.pipeline(1).audit()
    assert one.num_ranks == 2 and [r.rank for r in one.ranks] == built.replica_groups()[1]
    assert not one.ranks_missing and one.job is None
    truth = built.true_bubble(built.replica_groups())
    for r in one.ranks:
        assert r.bubble == pytest.approx(truth[r.rank], abs=0.005)
    with pytest.raises(IndexError):
        run.pipeline(2)


def test_every_command_reads_replicas(tmp_path):
    """gate budgets the spread, export groups each replica's ranks, explain and whatif take
    one replica (the slowest by default)."""
    import json

    from tests.support.cli import invoke

    built = build_replicas(tmp_path, one_f_one_b_orders(2, 4), dp=2, latency=100,
                           dur_of=lambda d, t: _dur(1.5 if d == 1 else 1.0))
    d = str(built.directory)
    res = invoke("gate", d, "--max-replica-spread", "0.05", "--no-config", "--format", "json")
    assert res.exit_code == 1, res.output
    check = next(c for c in json.loads(res.output)["checks"] if c["metric"] == "replica_spread")
    assert check["verdict"] == "fail" and check["index"] == 1
    assert invoke("gate", d, "--max-replica-spread", "0.9", "--no-config").exit_code == 0
    out = tmp_path / "t.json"
    assert invoke("export", d, "--perfetto", str(out)).exit_code == 0
    names = {e["pid"]: e["args"]["name"] for e in json.loads(out.read_text())["traceEvents"]
             if e.get("name") == "process_name"}
    assert names == {r: f"pipeline {0 if r in built.replica_groups()[0] else 1} · rank {r}"
                     for r in range(4)}
    res = invoke("explain", d, "--format", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["ranks"] == built.replica_groups()[1] and "pipeline 1, the slowest" in doc["notes"][0]
    res = invoke("whatif", d, "--scale", "0=0.5", "--pipeline", "0", "--format", "json")
    assert res.exit_code == 0, res.output
    assert "pipeline 0 of the job's 2" in json.loads(res.output)["notes"][0]


@pytest.mark.parametrize("orders_of,M,latency,slow", [
    (one_f_one_b_orders, 2, 0, None),  # M < P, no latency
    (gpipe_orders, 3, 700, (1, 2, 4.0)),  # M < P; replica 1's stage 2 four times slower
    (one_f_one_b_orders, 8, 50, (0, 0, 2.0)),  # replica 0's first stage twice as slow
])
def test_replicas_known_answer_whatever_the_run(tmp_path, orders_of, M, latency, slow):
    """The known answer holds for M < P, any latency, a slow stage in one replica and the
    events of every file in random order."""
    import json
    import random

    dur_of = None
    if slow:
        def dur_of(d, t):
            return _dur(slow[2], stage=slow[1]) if d == slow[0] else _dur()
    built = build_replicas(tmp_path, orders_of(4, M), dp=2, latency=latency, dur_of=dur_of)
    rng = random.Random(M)
    for f in built.files:
        doc = json.loads(f.read_text())
        rng.shuffle(doc["traceEvents"])
        f.write_text(json.dumps(doc))
    result = pipeaudit.load(built.directory).audit()
    _check_replicas(result, built, 4, 2, M)
    if slow:
        assert result.job["slowest_pipeline"] == slow[0]
        assert [f for f in result.findings if f.code == "SLOW_PIPELINE_REPLICA"]


def test_the_audit_holds_no_job_wide_or_finished_replica_tables(tmp_path, monkeypatch):
    """The audit of several replicas builds each replica's derived tables from its own ranks
    (not the whole job's, cut per replica) and drops them once the replica's findings are
    made; a subset of a timeline that has built them takes them, the same tables."""
    import numpy as np

    import pipeaudit.audit.run as run_mod

    built = build_replicas(tmp_path, one_f_one_b_orders(4, 8), dp=2, latency=100,
                           dur_of=lambda d, t: _dur(1.5 if d == 1 else 1.0))
    run = pipeaudit.load(built.directory)
    tl = run.timeline
    audited = []
    audit_pipeline = run_mod.audit_pipeline

    def spy(sub, **kw):
        pa = audit_pipeline(sub, **kw)
        audited.append(pa)
        return pa

    monkeypatch.setattr(run_mod, "audit_pipeline", spy)
    result = run_mod.audit(tl)
    assert len(audited) == 2 and len(result.pipelines) == 2
    assert tl._built("action_arrays") is None and tl._built("recv_facts") is None
    assert all(pa.tl._built("action_arrays") is None for pa in audited)  # forgotten
    monkeypatch.undo()
    assert run_mod.audit(tl).to_dict() == result.to_dict()
    # a subset of a timeline whose columns are built takes them: the same as its own
    ranks = built.replica_groups()[1]
    alone = tl.subset(ranks).action_arrays()
    tl.action_arrays()
    taken = tl.subset(ranks).action_arrays()
    arrays = {n: v for n, v in vars(alone).items() if isinstance(v, np.ndarray)}
    assert len(arrays) >= 3
    for name, value in arrays.items():
        assert np.array_equal(value, vars(taken)[name]), name
