"""``--stage-layers`` and ``--heavy-layer``: checked before anything starts, recorded, and the
blocks each stage builds."""

from __future__ import annotations

import pytest

from pipeaudit.errors import ConfigError
from pipeaudit.harness.config import (
    ModelConfig, ProfileConfig, parse_heavy_layers, parse_stage_layers,
)
from pipeaudit.harness.rerun import harness_config, rerun_name


def _cfg(**kw) -> ProfileConfig:
    return ProfileConfig(out="/tmp/unused", stages=4, microbatches=8, **kw)


def test_an_uneven_split_and_a_heavy_layer_set_each_stages_blocks():
    cfg = _cfg(split=(1, 3, 2, 2), heavy_layers={0: 4, 7: 2}, imbalance={2: 3}).validate(
        check_out=False)
    assert cfg.stage_layers == [1, 3, 2, 2]
    assert [cfg.layer_blocks(s) for s in range(4)] == [[4], [1, 1, 1], [3, 3], [1, 2]]
    assert ProfileConfig.from_dict(cfg.to_dict()) == cfg
    assert _cfg().stage_layers == [2, 2, 2, 2]  # the default: as even as possible


@pytest.mark.parametrize("changes,fragment", [
    ({"split": (3, 2, 2)}, "gives 3 stages; the run has 4"),
    ({"split": (3, 2, 2, 0)}, "at least one layer"),
    ({"split": (3, 2, 2, 2)}, "sums to 9 layers; --layers is 8"),
    ({"heavy_layers": {8: 2}}, "layer 8 does not exist"),
    ({"heavy_layers": {1: 0}}, "integer >= 1"),
])
def test_bad_splits_and_heavy_layers_are_refused(changes, fragment):
    with pytest.raises(ConfigError, match=fragment):
        _cfg(**changes).validate(check_out=False)


def test_parsing():
    assert parse_stage_layers("3,2,2,1") == (3, 2, 2, 1) and parse_stage_layers(None) is None
    assert parse_heavy_layers(["0:4", "7:2"]) == {0: 4, 7: 2}
    with pytest.raises(ConfigError, match="LAYER:FACTOR"):
        parse_heavy_layers(["0=4"])
    with pytest.raises(ConfigError, match="separated by commas"):
        parse_stage_layers("3;2")


def test_a_rerun_keeps_the_heavy_layers_and_takes_the_split():
    manifest = {"tool": "pipeaudit profile", "framework": {"name": "megatron-core"},
                "num_ranks": 4, "world_size": 4, "stage_layers": [2, 2, 2, 2],
                "model": ModelConfig().to_dict() | {"microbatch_size": 4}, "steps": 2,
                "warmup_steps": 1, "heavy_layers": {"0": 4}}
    cfg = harness_config(manifest, "/tmp/unused", "1f1b", 1, 8, (1, 3, 2, 2))
    assert cfg.framework == "megatron" and cfg.split == (1, 3, 2, 2)
    assert cfg.heavy_layers == {0: 4}
    assert rerun_name("1f1b", 1, 8, (1, 3, 2, 2)) == "1f1b_v1_m8_s1-3-2-2"
    assert rerun_name("1f1b", 1, 8) == "1f1b_v1_m8"
