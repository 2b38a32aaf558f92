"""Where --single-process puts each stage, for the GPUs a host has (the count is the host's
fact, set here; the choice is the harness's)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pipeaudit.errors import ConfigError  # noqa: E402
from pipeaudit.harness.config import ProfileConfig  # noqa: E402
from pipeaudit.harness.single import stage_devices  # noqa: E402


def _devices(monkeypatch, gpus: int, **kw) -> list[str]:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    config = ProfileConfig(out="unused", schedule="gpipe", single_process=True, **kw)
    return [str(d) for d in stage_devices(config)]


@pytest.mark.parametrize("gpus, kw, want", [
    (0, {}, ["cpu"] * 3),
    (1, {}, ["cpu"] * 3),  # auto: a GPU per stage or none
    (3, {}, ["cuda:0", "cuda:1", "cuda:2"]),
    (4, {"backend": "gloo"}, ["cpu"] * 3),  # gloo asks for the CPU
    (4, {"device": "cpu"}, ["cpu"] * 3),
    (1, {"device": "cuda"}, ["cuda:0"] * 3),  # every stage on the one GPU
    (2, {"device": "cuda"}, ["cuda:0", "cuda:1", "cuda:0"]),
    (3, {"backend": "nccl"}, ["cuda:0", "cuda:1", "cuda:2"]),
])
def test_stage_devices(monkeypatch, gpus, kw, want):
    assert _devices(monkeypatch, gpus, stages=3, **kw) == want


@pytest.mark.parametrize("gpus, kw, says", [
    (0, {"device": "cuda"}, "sees no CUDA device"),
    (2, {"backend": "nccl"}, "needs 3 CUDA devices, found 2"),
])
def test_impossible_placements_are_config_errors(monkeypatch, gpus, kw, says):
    with pytest.raises(ConfigError, match=says):
        _devices(monkeypatch, gpus, stages=3, **kw)
