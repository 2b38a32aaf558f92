"""The harness configuration of a run it made, with another schedule, chunks and M: what
``pipeaudit advise --verify`` reruns. Torch-free."""

from __future__ import annotations

import dataclasses

from pipeaudit.errors import ConfigError


def rerun_name(schedule: str, chunks: int, microbatches: int,
               stage_layers: tuple[int, ...] | None = None) -> str:
    """The folder of one configuration's rerun: ``SCHEDULE_vV_mM``, ``_sN-N-...`` after it for
    a split given layer by layer."""
    name = f"{schedule}_v{chunks}_m{microbatches}"
    return name if stage_layers is None else name + "_s" + "-".join(map(str, stage_layers))


def harness_config(manifest: dict, out: str, schedule: str, chunks: int, microbatches: int,
                   stage_layers: tuple[int, ...] | None = None):
    """The harness configuration of the run in ``manifest`` with another schedule, chunks and
    M (and ``stage_layers``: another split; None: as even as possible), the same global batch,
    framework and heavy layers; a heavier stage stays on the same layers."""
    from pipeaudit.harness.config import ModelConfig, ProfileConfig, framework_of_manifest

    if manifest.get("tool") != "pipeaudit profile":
        raise ConfigError("--verify reruns runs made by `pipeaudit profile`; for other runs "
                          "make the change advise prints and hold it to the prediction with "
                          "`pipeaudit advise --check BEFORE AFTER`")
    framework = framework_of_manifest((manifest.get("framework") or {}).get("name", "torch"))
    world = manifest.get("world_size") or manifest.get("num_ranks")
    if framework is None or manifest.get("single_process") or world != manifest.get("num_ranks"):
        raise ConfigError("--verify reruns one pipeline of one process per rank (torch, "
                          "DeepSpeed or Megatron-core in the harness); this run is not one")
    model = dict(manifest["model"])
    model.pop("microbatch_size", None)
    old_layers = manifest["stage_layers"]
    first_layer, acc = [], 0
    for n in old_layers:
        first_layer.append(acc)
        acc += n
    old_factor = {int(k): int(v) for k, v in (manifest.get("imbalance") or {}).items()}
    cfg = ProfileConfig(
        out=out, schedule=schedule, stages=manifest["num_ranks"], microbatches=microbatches,
        chunks=chunks, steps=manifest["steps"], warmup_steps=manifest["warmup_steps"],
        model=ModelConfig(**model), slow_ranks={int(k): int(v) for k, v in
                                                (manifest.get("slow_ranks") or {}).items()},
        step_marks=manifest.get("step_marks", True), profile_memory=manifest.get("profile_memory", False),
        record_shapes=manifest.get("record_shapes", False), seed=manifest.get("seed", 0),
        threads=manifest.get("threads", 1), backend="gloo", device="cpu", force=True,
        framework=framework, split=None if stage_layers is None else tuple(stage_layers),
        heavy_layers={int(k): int(v) for k, v in (manifest.get("heavy_layers") or {}).items()})
    if old_factor:
        imbalance = {}
        acc = 0
        for s, n in enumerate(cfg.stage_layers):
            owner = max(i for i, f in enumerate(first_layer) if f <= acc)
            if old_factor.get(owner, 1) > 1:
                imbalance[s] = old_factor[owner]
            acc += n
        cfg = dataclasses.replace(cfg, imbalance=imbalance)
    return cfg.validate(check_out=False)
