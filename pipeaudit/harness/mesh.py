"""The DeviceMesh of a P x D x T run and this rank's place in it (imports torch).

Built as torchtitan builds its dense mesh: one ``init_device_mesh`` over all ranks, pipeline
dimension outermost, named ``pp``, ``dp_shard`` (FSDP) or ``dp_replicate`` (DDP), ``tp``
(see ``pipeaudit.harness.layout``). DeviceMesh creates one process group per mesh line; torch
2.13 describes them in each trace's ``distributedInfo.pg_config`` as ``mesh_<dim>`` (only the
groups the rank belongs to, plus ``default_pg``).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from pipeaudit.harness.layout import DP_DIM_NAMES, MeshLayout


@dataclass
class RankPlace:
    """One rank's coordinates and the sub-meshes it uses."""

    rank: int
    pp_rank: int  #: position in its pipeline
    replica: int  #: data-parallel index d
    tp_rank: int  #: tensor-parallel index t
    pp_group: object | None  #: the pipeline's process group; None: the world group
    dp_mesh: DeviceMesh | None  #: 1-D mesh over the replicas of this stage (D > 1)
    tp_mesh: DeviceMesh | None  #: 1-D mesh over the tensor-parallel peers (T > 1)
    mesh: DeviceMesh | None  #: the whole mesh (None when D = T = 1)


def place_rank(layout: MeshLayout, rank: int, device_type: str) -> RankPlace:
    """Build the mesh (collective: every rank must call it) and return this rank's place."""
    c = layout.coords(rank)
    if not layout.uses_mesh:
        return RankPlace(rank, c["pp"], c["dp"], c["tp"], None, None, None, None)
    dims = layout.mesh_dims
    mesh = init_device_mesh(device_type, tuple(n for _, n in dims),
                            mesh_dim_names=tuple(name for name, _ in dims))
    if mesh["pp"].get_local_rank() != c["pp"]:  # pragma: no cover - torch's layout changed
        raise RuntimeError(f"rank {rank}: DeviceMesh puts it at pp {mesh['pp'].get_local_rank()}, "
                           f"expected {c['pp']}")
    dp_mesh = mesh[DP_DIM_NAMES[layout.dp_mode]] if layout.dp > 1 else None
    tp_mesh = mesh["tp"] if layout.tp > 1 else None
    return RankPlace(rank, c["pp"], c["dp"], c["tp"], mesh["pp"].get_group(), dp_mesh, tp_mesh, mesh)
