"""Real P x D x T runs on a DeviceMesh (gloo, CPU): traces, process groups, DP/TP collectives.

Each test starts real worker processes with a tiny model. What is checked is the structure of
the traces torch writes, never a timing: one file per rank of the world, ``distributedInfo``
with the world size and exactly the process groups the layout implies, M forwards and M
backwards of the rank's stage in every step, the data-parallel (FSDP or DDP) and
tensor-parallel collectives where torch issues them, and a slowed rank doing FACTOR times the
matmuls of its peer in the other replica.
"""

from __future__ import annotations

import collections
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from pipeaudit.harness import MeshLayout  # noqa: E402
from tests.support.child import repo_env
from tests.support.paths import REPO
from tests.support.cli import invoke
from tests.support.kineto import inside, load, spans

pytestmark = pytest.mark.slow
TINY = ["--hidden", "64", "--seq-len", "8", "--steps", "2", "--warmup-steps", "1"]
_PP = re.compile(r"^PP:(\d+)([FB])(\d+)$")
MATMUL = ("aten::addmm", "aten::mm")





def profile(tmp_path: Path, *args: str) -> tuple[Path, dict]:
    out = tmp_path / "run"
    res = invoke("profile", *args, *TINY, "--out", str(out))
    assert res.exit_code == 0, res.output
    return out, json.loads((out / "manifest.json").read_text())


def expected_groups(lay: MeshLayout, rank: int) -> set[tuple[str, tuple[int, ...]]]:
    """(pg_desc, ranks) of every process group ``rank`` belongs to, from the layout alone."""
    c = lay.coords(rank)
    groups = {("default_pg", tuple(range(lay.world_size))),
              ("mesh_pp", tuple(lay.pipeline(c["dp"], c["tp"])))}
    names = lay.mesh_dim_names
    if lay.dp > 1:
        groups.add((f"mesh_{names[1]}", tuple(lay.rank(c["pp"], d, c["tp"]) for d in range(lay.dp))))
    if lay.tp > 1:
        groups.add(("mesh_tp", tuple(lay.rank(c["pp"], c["dp"], t) for t in range(lay.tp))))
    return groups


def check_layout(out: Path, man: dict, p: int, d: int, t: int, m: int, dp_mode: str = "fsdp") -> None:
    """Files, headers, pg_config, and per step M F + M B spans of the rank's own stage."""
    lay = MeshLayout(p, d, t, dp_mode)
    world = p * d * t
    assert man["world_size"] == world and man["num_ranks"] == p
    assert man["layout"]["mesh_dim_names"] == lay.mesh_dim_names
    assert man["pipelines"] == lay.replicas()
    assert sorted(x.name for x in out.iterdir()) == sorted(
        ["manifest.json"] + [f"rank{r}.json.gz" for r in range(world)])
    for r in range(world):
        doc = load(out / f"rank{r}.json.gz")
        info = doc["distributedInfo"]
        assert (info["rank"], info["world_size"]) == (r, world)
        got = {(g["pg_desc"], tuple(g["ranks"])) for g in info["pg_config"]}
        assert got == expected_groups(lay, r), r
        stage = lay.coords(r)["pp"]
        steps = spans(doc, "ProfilerStep#")
        assert [s["name"] for s in steps] == ["ProfilerStep#0", "ProfilerStep#1"]
        for st in steps:
            acts = collections.Counter()
            for e in spans(doc, "PP:"):
                if inside(e, st):
                    s, kind, _ = _PP.match(e["name"]).groups()
                    acts[(int(s), kind)] += 1
            assert acts == {(stage, "F"): m, (stage, "B"): m}, (r, acts)


def ops_in_step(doc: dict, step: dict, name: str) -> list[dict]:
    return [e for e in spans(doc, name) if e["name"] == name and inside(e, step)]


# ------------------------------------------------------------------------ FSDP
def test_pp2_dp2_fsdp_groups_and_gradient_reduce_scatter(tmp_path):
    m = 4
    out, man = profile(tmp_path, "--schedule", "1f1b", "--stages", "2", "--dp", "2",
                       "--microbatches", str(m), "--layers", "2")
    check_layout(out, man, 2, 2, 1, m)
    assert man["layout"]["dp_mode"] == "fsdp" and man["stage_to_rank"] == [0, 2]
    assert man["rank_coords"]["3"] == {"pp": 1, "dp": 1, "tp": 0}
    assert set(man["rank_actions"]) == {"0", "1", "2", "3"}
    assert man["rank_actions"]["1"] == man["rank_actions"]["0"]  # same stage, other replica
    for r in range(4):
        doc = load(out / f"rank{r}.json.gz")
        stage = r // 2
        for st in spans(doc, "ProfilerStep#"):
            # FSDP2 under pipelining: one all-gather (in the first forward: no reshard after
            # forward) and one reduce-scatter of the gradients per step, after the last backward
            # and before the optimizer step.
            ag = ops_in_step(doc, st, "c10d::_allgather_base_")
            rs = ops_in_step(doc, st, "c10d::_reduce_scatter_base_")
            assert len(ag) == 1 and len(rs) == 1, (r, len(ag), len(rs))
            f0 = [e for e in spans(doc, f"PP:{stage}F0") if inside(e, st)]
            assert len(f0) == 1 and inside(ag[0], f0[0])
            last_b = max((e for e in spans(doc, f"PP:{stage}B") if inside(e, st)),
                         key=lambda e: e["ts"])
            opt = [e for e in spans(doc, "Optimizer.step#") if inside(e, st)]
            assert last_b["ts"] + last_b["dur"] <= rs[0]["ts"] <= opt[0]["ts"]


# ------------------------------------------------------------------------- DDP
def test_pp2_dp2_ddp_allreduce_in_the_last_backward(tmp_path):
    m = 3
    out, man = profile(tmp_path, "--schedule", "gpipe", "--stages", "2", "--dp", "2",
                       "--dp-mode", "ddp", "--microbatches", str(m), "--layers", "2")
    check_layout(out, man, 2, 2, 1, m, "ddp")
    assert man["layout"]["mesh_dim_names"] == ["pp", "dp_replicate"]
    for r in range(4):
        doc = load(out / f"rank{r}.json.gz")
        stage = r // 2
        for st in spans(doc, "ProfilerStep#"):
            # no_sync for every backward but the last: one all-reduce per gradient bucket (DDP's
            # first bucket is small: 2 here), all issued by DDP's reducer hooks during the last
            # backward
            ar = ops_in_step(doc, st, "c10d::allreduce_")
            assert ar, r
            last_b = [e for e in spans(doc, f"PP:{stage}B{m - 1}") if inside(e, st)]
            assert len(last_b) == 1 and all(inside(a, last_b[0]) for a in ar)


# ------------------------------------------------------------------ TP (and 3-D)
def test_pp2_dp2_tp2_three_dimensional_mesh(tmp_path):
    m = 2
    out, man = profile(tmp_path, "--schedule", "1f1b", "--stages", "2", "--dp", "2", "--tp", "2",
                       "--microbatches", str(m), "--layers", "2")
    check_layout(out, man, 2, 2, 2, m)
    assert man["layout"]["mesh_dim_names"] == ["pp", "dp_shard", "tp"]
    assert man["pipelines"] == [[[0, 1], [4, 5]], [[2, 3], [6, 7]]]  # per replica, TP peers
    for r in range(8):
        doc = load(out / f"rank{r}.json.gz")
        for st in spans(doc, "ProfilerStep#"):
            # row-wise fc2: one all-reduce of the output per forward; column-wise fc1: one of
            # the input gradient per backward -- inside the rank's PP: spans
            tp = [e for e in ops_in_step(doc, st, "_c10d_functional::all_reduce")
                  if any(inside(e, a) for a in spans(doc, "PP:"))]
            assert len(tp) == 2 * m, (r, len(tp))
            assert len(ops_in_step(doc, st, "c10d::_reduce_scatter_base_")) == 1


# ------------------------------------------------------------------- slow rank
def test_slow_rank_does_factor_times_the_matmuls_of_its_peer(tmp_path):
    out, man = profile(tmp_path, "--schedule", "1f1b", "--stages", "2", "--dp", "2",
                       "--microbatches", "2", "--layers", "2", "--slow-rank", "3=3")
    assert man["slow_ranks"] == {"3": 3}
    counts = {}
    for r in range(4):
        doc = load(out / f"rank{r}.json.gz")
        pp = spans(doc, "PP:")
        counts[r] = sum(1 for e in spans(doc, "aten::") if e["name"] in MATMUL
                        and any(inside(e, a) for a in pp))
    # rank 3 is stage 1 of replica 1; rank 2 the same stage in replica 0
    assert counts[3] == 3 * counts[2] > 0 and counts[0] == counts[1] == counts[2], counts


# -------------------------------------------------------------------- torchrun
def test_torchrun_with_dp(tmp_path):
    out = tmp_path / "tr"
    env = repo_env(TMPDIR=str(tmp_path))  # torchrun leaves its log folder (torchelastic_*) there
    from pipeaudit.harness.launcher import free_port

    res = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "4",
         "--master-port", str(free_port()), "-m", "pipeaudit.harness", "--dp", "2",
         "--schedule", "gpipe", "--microbatches", "2", "--layers", "2", *TINY, "--out", str(out)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    man = json.loads((out / "manifest.json").read_text())
    assert man["launcher"] == "torchrun"
    check_layout(out, man, 2, 2, 1, 2)
