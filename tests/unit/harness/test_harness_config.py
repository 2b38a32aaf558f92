"""Harness configuration: validation, import hygiene. No processes, no torch (``profile``'s
fail-fast: ``tests/cli/test_profile_cli.py``)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pipeaudit.errors import ConfigError
from pipeaudit.harness import ModelConfig, ProfileConfig, parse_imbalance, stage_to_rank
from pipeaudit.harness.catalog import SCHEDULE_NAMES, check_schedule, rank_stages
from pipeaudit.harness.faults import Fault, parse_faults
from tests.support.child import repo_env, run_python
from tests.support.paths import REPO


def _cfg(tmp_path, **kw) -> ProfileConfig:
    kw.setdefault("out", str(tmp_path / "out"))
    return ProfileConfig(**kw)


# ------------------------------------------------------------------ placement
def test_loop_placement():
    assert stage_to_rank("loop", 4, 1) == [0, 1, 2, 3]
    assert stage_to_rank("loop", 2, 3) == [0, 1, 0, 1, 0, 1]


def test_v_placement_rank_holds_r_and_2p_minus_1_minus_r():
    for p in range(1, 7):
        mapping = stage_to_rank("v", p, 2)
        for r in range(p):
            assert rank_stages("v", p, 2, r) == sorted([r, 2 * p - 1 - r])
        assert len(mapping) == 2 * p


def test_stage_layers_split_contiguously_and_evenly(tmp_path):
    cfg = _cfg(tmp_path, schedule="interleaved-1f1b", stages=2, chunks=2,
               model=ModelConfig(layers=10))
    assert cfg.stage_layers == [3, 3, 2, 2]
    assert sum(cfg.stage_layers) == 10


def test_defaults_validate(tmp_path):
    for name in SCHEDULE_NAMES:
        m = 4 if name != "dualpipev" else 4
        cfg = _cfg(tmp_path, schedule=name, stages=2, microbatches=m,
                   model=ModelConfig(layers=4))
        cfg.validate()
        assert cfg.num_stages == 2 * cfg.num_chunks


def test_config_roundtrip(tmp_path):
    cfg = _cfg(tmp_path, schedule="zbv", imbalance={1: 3}, command=("pipeaudit", "profile"))
    again = ProfileConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert again == cfg


# ----------------------------------------------------------------- constraints
@pytest.mark.parametrize(
    "name,p,m,v,fragment",
    [
        ("1f1b", 4, 3, 1, "at least as many microbatches as ranks"),
        ("zbv", 2, 4, 3, "--chunks must be 2"),
        ("dualpipev", 2, 3, 2, "--microbatches 3 < 2 x --ranks"),
        ("interleaved-1f1b", 4, 9, 2, "multiple of max(1, M // P) = 2"),
        ("interleaved-zb", 2, 5, 2, "multiple of max(1, M // P) = 2"),
        ("gpipe", 2, 4, 2, "--chunks must be 1"),
        ("naive", 2, 4, 2, "--chunks must be 1"),
        ("nope", 2, 4, 1, "unknown schedule 'nope'"),
    ],
)
def test_invalid_schedule_combinations(name, p, m, v, fragment):
    with pytest.raises(ConfigError) as exc:
        check_schedule(name, p, m, v)
    assert fragment in str(exc.value)
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize(
    "name,p,m,v",
    [("1f1b", 4, 4, 1), ("gpipe", 4, 1, 1), ("interleaved-1f1b", 4, 3, 2),
     ("interleaved-1f1b", 4, 10, 2), ("zbv", 4, 1, 2), ("dualpipev", 2, 4, 2),
     ("looped-bfs", 3, 5, 3), ("naive", 4, 1, 1)],
)
def test_valid_schedule_combinations(name, p, m, v):
    check_schedule(name, p, m, v)


def test_parse_imbalance():
    assert parse_imbalance(["1=3", "0=2"]) == {1: 3, 0: 2}
    for bad in ("1", "a=2", "1=1.5", "1=x"):
        with pytest.raises(ConfigError):
            parse_imbalance([bad])
    with pytest.raises(ConfigError, match="twice"):
        parse_imbalance(["1=2", "1=3"])


def test_parse_faults():
    assert parse_faults("1:2:raise, 0:0:hang") == [Fault(1, 2, "raise"), Fault(0, 0, "hang")]
    assert parse_faults("") == []
    with pytest.raises(ValueError):
        parse_faults("1:2:explode")


def test_harness_package_imports_without_torch_or_click():
    code = (
        "import sys\n"
        "import pipeaudit, pipeaudit.harness\n"
        "from pipeaudit.harness import ProfileConfig, run_profile\n"
        "bad = [m for m in ('torch', 'click') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    res = run_python(code)
    assert res.returncode == 0, res.stderr


def test_torchrun_entry_requires_torchrun_env(tmp_path):
    env = repo_env()
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    res = subprocess.run([sys.executable, "-m", "pipeaudit.harness", "--out", str(tmp_path / "o")],
                         cwd=REPO, capture_output=True, text=True, env=env, timeout=60)
    assert res.returncode == 2
    assert "runs one rank under torchrun" in res.stderr
