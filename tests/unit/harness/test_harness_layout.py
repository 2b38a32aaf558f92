"""P x D x T layouts, the single-process issue order, and the new options' validation.

No processes and no torch: what is checked here is decided before anything starts.
"""

from __future__ import annotations

import itertools
import json

import pytest

from pipeaudit.errors import ConfigError
from pipeaudit.harness import MeshLayout, ModelConfig, ProfileConfig, parse_slow_ranks
from pipeaudit.harness.manifest import build_manifest
from pipeaudit.harness.plans import parse_action, single_process_order, single_stage_rank_actions
from tests.support.cli import invoke


def _cfg(tmp_path, **kw) -> ProfileConfig:
    kw.setdefault("out", str(tmp_path / "out"))
    return ProfileConfig(**kw)


# ---------------------------------------------------------------------- layout
@pytest.mark.parametrize("p,d,t", list(itertools.product([1, 2, 4], [1, 2, 3], [1, 2])))
def test_coords_and_ranks_are_inverse_and_pp_is_outermost(p, d, t):
    lay = MeshLayout(p, d, t)
    seen = set()
    for r in range(lay.world_size):
        c = lay.coords(r)
        assert lay.rank(c["pp"], c["dp"], c["tp"]) == r
        seen.add((c["pp"], c["dp"], c["tp"]))
    assert len(seen) == p * d * t
    # pp outermost: consecutive ranks share the pipeline position (torchtitan's mesh order)
    assert [lay.coords(r)["pp"] for r in range(lay.world_size)] == sorted(
        lay.coords(r)["pp"] for r in range(lay.world_size))
    pipes = lay.pp_groups()
    assert len(pipes) == d * t and sorted(itertools.chain(*pipes)) == list(range(p * d * t))
    for pipe in pipes:
        assert [lay.coords(r)["pp"] for r in pipe] == list(range(p))
    reps = lay.replicas()  # the manifest's pipelines: per replica, by position (TP peers listed)
    assert len(reps) == d
    for dd, rep in enumerate(reps):
        assert len(rep) == p
        for pos, ranks in enumerate(rep):
            ranks = ranks if t > 1 else [ranks]
            assert [lay.coords(r) for r in ranks] == [{"pp": pos, "dp": dd, "tp": tt} for tt in range(t)]


def test_p4_dp2_pipelines_are_every_other_rank():
    lay = MeshLayout(4, 2)
    assert lay.pp_groups() == lay.replicas() == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert MeshLayout(2, 2, 2).replicas() == [[[0, 1], [4, 5]], [[2, 3], [6, 7]]]
    assert lay.coords(5) == {"pp": 2, "dp": 1, "tp": 0}
    assert lay.mesh_dim_names == ["pp", "dp_shard"]
    assert MeshLayout(4, 2, dp_mode="ddp").mesh_dim_names == ["pp", "dp_replicate"]
    assert MeshLayout(2, 2, 2).mesh_dim_names == ["pp", "dp_shard", "tp"]
    assert MeshLayout(2, 1, 2).mesh_dim_names == ["pp", "tp"]
    assert MeshLayout(4).mesh_dim_names == [] and not MeshLayout(4).uses_mesh


def test_stage_to_rank_is_replica_0(tmp_path):
    assert _cfg(tmp_path, stages=4, dp=2, microbatches=8).stage_to_rank == [0, 2, 4, 6]
    assert _cfg(tmp_path, stages=2, dp=2, tp=2).stage_to_rank == [0, 4]
    zbv = _cfg(tmp_path, schedule="zbv", stages=2, dp=2, model=ModelConfig(layers=4))
    assert zbv.stage_to_rank == [0, 2, 2, 0]
    assert _cfg(tmp_path, stages=4, microbatches=8).stage_to_rank == [0, 1, 2, 3]
    single = _cfg(tmp_path, stages=3, single_process=True, model=ModelConfig(layers=3))
    assert single.stage_to_rank == [0, 0, 0] and single.world_size == 1


def test_imbalance_adds_blocks_and_slow_rank_repeats_them(tmp_path):
    """A heavier stage holds k blocks of its own weights per layer; a slow rank applies each
    block k times (its data-parallel peers keep the same parameters)."""
    torch = pytest.importorskip("torch")
    from pipeaudit.harness.model import build_stage_module

    cfg = _cfg(tmp_path, stages=2, dp=2, imbalance={1: 2}, slow_ranks={3: 3},
               model=ModelConfig(layers=2, hidden=16))
    cpu = torch.device("cpu")
    shape = {(s, r): (len(m.blocks), m.repeat) for s, r in ((0, 0), (0, 1), (1, 2), (1, 3))
             for m in [build_stage_module(cfg, s, cpu, r)]}
    assert shape == {(0, 0): (1, 1), (0, 1): (1, 1), (1, 2): (2, 1), (1, 3): (2, 3)}
    heavy = build_stage_module(cfg, 1, cpu, 2)
    assert not torch.equal(heavy.blocks[0].fc1.weight, heavy.blocks[1].fc1.weight)
    # the same stage on two data-parallel ranks: the same weights, slowed or not
    slowed = build_stage_module(cfg, 1, cpu, 3)
    assert all(torch.equal(a, b) for a, b in zip(heavy.parameters(), slowed.parameters()))


def test_manifest_layout_fields(tmp_path):
    cfg = _cfg(tmp_path, stages=4, dp=2, microbatches=8, slow_ranks={5: 3},
               model=ModelConfig(layers=4)).validate()
    man = build_manifest(cfg, torch_version="x", backend="gloo", device="cpu", host="h",
                         launcher="local", step_wall_s=[0.1], rank_actions={}, annotation_source="harness")
    assert man["num_ranks"] == 4 and man["world_size"] == 8
    assert man["layout"] == {"pp": 4, "dp": 2, "tp": 1, "order": ["pp", "dp", "tp"],
                             "dp_mode": "fsdp", "mesh_dim_names": ["pp", "dp_shard"]}
    assert man["pipelines"] == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert man["rank_coords"]["5"] == {"pp": 2, "dp": 1, "tp": 0}
    assert man["slow_ranks"] == {"5": 3}
    assert sorted(man["traces"], key=int) == [str(r) for r in range(8)]
    json.dumps(man)


def test_config_roundtrip_with_new_fields(tmp_path):
    cfg = _cfg(tmp_path, stages=2, dp=2, tp=2, slow_ranks={1: 2}, step_marks=False,
               dp_mode="fsdp")
    assert ProfileConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg


def test_parse_slow_ranks():
    assert parse_slow_ranks(["5=3", "0=2"]) == {5: 3, 0: 2}
    for bad in ("5", "r=2", "5=1.5"):
        with pytest.raises(ConfigError, match="RANK=FACTOR"):
            parse_slow_ranks([bad])
    with pytest.raises(ConfigError, match="rank 5 twice"):
        parse_slow_ranks(["5=2", "5=3"])


# ----------------------------------------------------------------- validation
BAD = [
    (dict(dp=0), "--dp must be an integer >= 1"),
    (dict(tp=0), "--tp must be an integer >= 1"),
    (dict(dp=2, dp_mode="zero"), "--dp-mode must be one of fsdp, ddp"),
    (dict(dp=2, dp_mode="ddp", schedule="dualpipev", microbatches=4, model=ModelConfig(layers=4)),
     "--dp-mode ddp does not run dualpipev"),
    (dict(dp=2, tp=2, dp_mode="ddp"), "--dp-mode ddp cannot be combined with --tp"),
    (dict(tp=3), "--tp 3 must divide --hidden 256"),
    (dict(dp=2, slow_ranks={4: 2}), "--slow-rank rank 4 does not exist (ranks are 0..3"),
    (dict(dp=2, slow_ranks={1: 0}), "factor for rank 1 must be an integer >= 1"),
    (dict(tp=2, slow_ranks={1: 2}), "--slow-rank cannot be combined with --tp > 1"),
    (dict(single_process=True, schedule="zbv", model=ModelConfig(layers=4)),
     "--single-process runs naive, gpipe, 1f1b"),
    (dict(single_process=True, dp=2), "--single-process runs one pipeline"),
    (dict(single_process=True, slow_ranks={0: 2}), "instead of --slow-rank"),
]


@pytest.mark.parametrize("kw,fragment", BAD, ids=[b[1] for b in BAD])
def test_invalid_layouts_fail_in_one_line(tmp_path, kw, fragment):
    with pytest.raises(ConfigError) as exc:
        _cfg(tmp_path, **kw).validate()
    assert fragment in str(exc.value) and "\n" not in str(exc.value)


def test_cli_rejects_bad_layout_before_starting(tmp_path):

    out = tmp_path / "o"
    res = invoke("profile", "--stages", "2", "--dp", "2", "--slow-rank", "9=2",
                 "--out", str(out))
    assert res.exit_code == 2
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "--slow-rank rank 9 does not exist" in lines[0]
    assert not out.exists()


# ------------------------------------------------------- single-process order
ORDERS = [(name, p, m) for name in ("naive", "gpipe", "1f1b")
          for p, m in ((1, 1), (2, 1), (2, 4), (3, 3), (4, 8), (5, 7))
          if not (name == "1f1b" and m < p)]  # 1f1b needs M >= P


@pytest.mark.parametrize("name,p,m", ORDERS)
def test_single_process_order_respects_dependencies_and_each_stage_plan(name, p, m):
    order = [parse_action(a) for a in single_process_order(name, p, m)]
    pos = {a: i for i, a in enumerate(order)}
    assert len(pos) == len(order) == 2 * p * m
    for s, kind, mb in order:
        if kind == "F" and s > 0:
            assert pos[(s - 1, "F", mb)] < pos[(s, "F", mb)]
        if kind == "B":
            dep = (s + 1, "B", mb) if s < p - 1 else (s, "F", mb)
            assert pos[dep] < pos[(s, "B", mb)]
    plans = single_stage_rank_actions(name, p, m)
    for s in range(p):  # every stage runs its own plan, in the plan's order
        assert [f"{a}{k}{b}" for a, k, b in order if a == s] == plans[s]


def test_single_process_order_known_answers():
    assert single_process_order("naive", 2, 2) == ["0F0", "1F0", "1B0", "0B0",
                                                   "0F1", "1F1", "1B1", "0B1"]
    # GPipe wavefront with F = 1, B = 2 time units: F(s, m) starts at s + m; stage 1's B(m) at
    # 4 + 2m, stage 0's at 6 + 2m (ties go to the lower stage)
    assert single_process_order("gpipe", 2, 3) == ["0F0", "0F1", "1F0", "0F2", "1F1", "1F2",
                                                   "1B0", "0B0", "1B1", "0B1", "1B2", "0B2"]
    # 1F1B: stage 0 warms up with P forwards, the last stage alternates F and B
    order = single_process_order("1f1b", 2, 3)
    assert [a for a in order if a.startswith("0")] == ["0F0", "0F1", "0B0", "0F2", "0B1", "0B2"]
    assert [a for a in order if a.startswith("1")] == ["1F0", "1B0", "1F1", "1B1", "1F2", "1B2"]
