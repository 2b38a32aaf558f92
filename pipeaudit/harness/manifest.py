"""``manifest.json``: what a harness run did, next to its traces. Torch-free.

Fields (schema_version 1):

``schema_version`` 1 · ``tool`` "pipeaudit profile" · ``schedule`` (CLI name) ·
``torch_schedule`` (torch class name or "naive") · ``num_ranks`` P (ranks of one
pipeline; 1 with ``single_process``) · ``world_size`` (P x D x T processes) ·
``num_stages`` P·v · ``num_microbatches`` M · ``chunks`` v · ``placement``
("loop" or "v") · ``stage_to_rank`` (global rank of each stage in pipeline replica 0) ·
``layout`` ({pp, dp, tp, order, dp_mode, mesh_dim_names}) · ``pipelines`` (for each
data-parallel replica its ranks by pipeline position; with tp > 1 each position is the list
of its tensor-parallel ranks) ·
``rank_coords`` ({rank: {pp, dp, tp}}) · ``stage_layers`` (layers per stage) · ``heavy_layers`` ({layer: factor}) · ``model``
(dict) · ``imbalance`` ({stage: factor}, keys are strings in JSON) · ``slow_ranks``
({rank: factor}) · ``steps`` · ``warmup_steps`` · ``step_marks`` (ProfilerStep#i spans
present) · ``single_process`` · ``stage_devices`` (single process: device of each stage,
else null) · ``stages_concurrent`` (single process: whether the stages' devices run at the
same time, false on CPU; else null) · ``annotated`` (every compute action has a ``PP:``
span) · ``annotation_source`` ("torch-runtime", "harness" or "none") · ``action_kinds`` ·
``rank_actions`` ({rank: [actions in execution order]}, every rank) · ``torch_version`` ·
``backend`` · ``device`` · ``host`` · ``launcher`` ("local" or "torchrun") · ``threads`` ·
``step_wall_s`` (rank 0, per profiled step) · ``warmup_step_wall_s`` (rank 0, per warm-up
step: the same training step without the profiler, for measuring its overhead) ·
``profile_memory`` · ``record_shapes`` · ``seed`` · ``traces`` ({rank: file name}) ·
``command`` (argv) · ``created`` (ISO 8601, UTC).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pipeaudit.harness.catalog import get_spec
from pipeaudit.harness.config import ProfileConfig
from pipeaudit.outfiles import write_text_atomic

MANIFEST_NAME = "manifest.json"
SCHEMA_VERSION = 1
TOOL = "pipeaudit profile"


def trace_name(rank: int) -> str:
    return f"rank{rank}.json.gz"


def build_manifest(
    config: ProfileConfig,
    *,
    torch_version: str,
    backend: str,
    device: str,
    host: str,
    launcher: str,
    step_wall_s: list[float],
    rank_actions: dict[int, list[str]],
    annotation_source: str,
    warmup_step_wall_s: list[float] | None = None,
    stage_devices: list[str] | None = None,
    stages_concurrent: bool | None = None,
    p2p_link: list[list[float]] | None = None,
) -> dict[str, Any]:
    spec = get_spec(config.schedule)
    layout = config.layout
    world = config.world_size
    if config.single_process:
        pipelines, coords = [[0]], {"0": {"pp": 0, "dp": 0, "tp": 0}}
    else:
        pipelines = layout.replicas()
        coords = {str(r): layout.coords(r) for r in range(world)}
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": TOOL,
        "schedule": spec.name,
        "torch_schedule": spec.torch_class,
        "num_ranks": 1 if config.single_process else config.stages,
        "world_size": world,
        "num_stages": config.num_stages,
        "num_microbatches": config.microbatches,
        "chunks": config.num_chunks,
        "placement": spec.placement,
        "stage_to_rank": config.stage_to_rank,
        "layout": layout.to_dict(),
        "pipelines": pipelines,
        "rank_coords": coords,
        "stage_layers": config.stage_layers,
        "model": {**config.model.to_dict(), "batch_size": config.batch_size,
                  "microbatch_size": config.batch_size // config.microbatches},
        "imbalance": {str(k): v for k, v in sorted(config.imbalance.items())},
        "heavy_layers": {str(k): v for k, v in sorted(config.heavy_layers.items())},
        "slow_ranks": {str(k): v for k, v in sorted(config.slow_ranks.items())},
        "steps": config.steps,
        "warmup_steps": config.warmup_steps,
        "step_marks": config.step_marks,
        "single_process": config.single_process,
        "stage_devices": stage_devices,
        "stages_concurrent": stages_concurrent,
        "annotated": annotation_source != "none",
        "annotation_source": annotation_source,
        "action_kinds": list(spec.kinds),
        "rank_actions": {str(r): a for r, a in sorted(rank_actions.items())},
        "torch_version": torch_version,
        "backend": backend,
        "device": device,
        "host": host,
        "launcher": launcher,
        "threads": config.threads,
        "step_wall_s": [round(x, 6) for x in step_wall_s],
        "warmup_step_wall_s": [round(x, 6) for x in warmup_step_wall_s or []],
        "profile_memory": config.profile_memory,
        "record_shapes": config.record_shapes,
        "seed": config.seed,
        # the link timed before the profiled steps (harness.link_probe): [bytes, seconds]
        "p2p_link": {"samples": p2p_link} if p2p_link else None,
        "traces": {str(r): trace_name(r) for r in range(world)},
        "command": list(config.command),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def write_manifest(out_dir: str | Path, manifest: dict[str, Any]) -> Path:
    """Write atomically (temp file + rename) so readers never see half a manifest."""
    path = Path(out_dir) / MANIFEST_NAME
    write_text_atomic(path, json.dumps(manifest, indent=2) + "\n", what="the manifest")
    return path


def read_manifest(out_dir: str | Path) -> dict[str, Any]:
    return json.loads((Path(out_dir) / MANIFEST_NAME).read_text())
