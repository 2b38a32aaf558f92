"""Where each rank sits in a P x D x T job: the DeviceMesh layout of a harness run. Torch-free.

The harness lays ranks out as torchtitan's ``ParallelDims`` does: one DeviceMesh over all
ranks with the pipeline dimension outermost, then data parallel, then tensor parallel
(torchtitan: ``("pp", "dp_replicate", "dp_shard", "cp", "tp")``). So the rank with pipeline
position ``p``, data-parallel index ``d`` and tensor-parallel index ``t`` is
``(p * D + d) * T + t``; a pipeline process group (the P ranks that hand activations to each
other) is every D*T-th rank, and a data-parallel replica of the pipeline is the T pp groups
that share d.

``grid="dp-outer"`` puts the data-parallel dimension outermost instead (DeepSpeed's
``ProcessTopology(axes=["data", "pipe"])``, Megatron's ``order="dp-pp"`` style): rank
``(d * P + p) * T + t``, so a pipeline is P consecutive ranks (times T).

Mesh dimension names follow torchtitan: ``pp``; ``dp_shard`` for FSDP (torchtitan's
``data_parallel_shard_degree``) or ``dp_replicate`` for DDP; ``tp``. Dimensions of size 1
other than ``pp`` are left out of the mesh (torchtitan gives them only a fake process group),
and with D = T = 1 no mesh is built at all (the world group is the pipeline).
"""

from __future__ import annotations

from dataclasses import dataclass

#: The logical order of the dimensions, outermost first.
ORDER: tuple[str, ...] = ("pp", "dp", "tp")
DP_MODES: tuple[str, ...] = ("fsdp", "ddp")
#: Which of pp and dp is the outermost dimension of the grid.
GRIDS: tuple[str, ...] = ("pp-outer", "dp-outer")
DP_DIM_NAMES = {"fsdp": "dp_shard", "ddp": "dp_replicate"}


@dataclass(frozen=True)
class MeshLayout:
    """P pipeline positions x D data-parallel replicas x T tensor-parallel ranks."""

    pp: int
    dp: int = 1
    tp: int = 1
    dp_mode: str = "fsdp"
    grid: str = "pp-outer"  #: one of GRIDS

    @property
    def order(self) -> tuple[str, ...]:
        """The dimensions, outermost first."""
        return ORDER if self.grid == "pp-outer" else ("dp", "pp", "tp")

    @property
    def world_size(self) -> int:
        return self.pp * self.dp * self.tp

    @property
    def uses_mesh(self) -> bool:
        """A DeviceMesh is built only when there is more than one pipeline."""
        return self.dp * self.tp > 1

    @property
    def mesh_dims(self) -> list[tuple[str, int]]:
        """(name, size) of each mesh dimension, outermost first; [] when no mesh is built."""
        if not self.uses_mesh:
            return []
        sizes = {"pp": ("pp", self.pp), "dp": (DP_DIM_NAMES[self.dp_mode], self.dp),
                 "tp": ("tp", self.tp)}
        return [sizes[d] for d in self.order if d == "pp" or sizes[d][1] > 1]

    @property
    def mesh_dim_names(self) -> list[str]:
        return [name for name, _ in self.mesh_dims]

    def rank(self, pp: int, dp: int = 0, tp: int = 0) -> int:
        """Global rank of the given mesh coordinates."""
        if self.grid == "dp-outer":
            return (dp * self.pp + pp) * self.tp + tp
        return (pp * self.dp + dp) * self.tp + tp

    def coords(self, rank: int) -> dict[str, int]:
        """``{"pp": p, "dp": d, "tp": t}`` of a global rank."""
        rest, t = divmod(rank, self.tp)
        if self.grid == "dp-outer":
            d, p = divmod(rest, self.pp)
        else:
            p, d = divmod(rest, self.dp)
        return {"pp": p, "dp": d, "tp": t}

    def pipeline(self, dp: int = 0, tp: int = 0) -> list[int]:
        """The ranks of one pipeline (one pp process group), by pipeline position."""
        return [self.rank(p, dp, tp) for p in range(self.pp)]

    def pp_groups(self) -> list[list[int]]:
        """Every pipeline process group, ordered by (dp, tp): index ``d * T + t``."""
        return [self.pipeline(d, t) for d in range(self.dp) for t in range(self.tp)]

    def replicas(self) -> list[list]:
        """The manifest's ``pipelines``: for each data-parallel replica, its ranks by pipeline
        position; with T > 1 each position is the list of its T tensor-parallel ranks."""
        if self.tp == 1:
            return [self.pipeline(d) for d in range(self.dp)]
        return [[[self.rank(p, d, t) for t in range(self.tp)] for p in range(self.pp)]
                for d in range(self.dp)]

    def to_dict(self) -> dict:
        """The manifest's ``layout``."""
        return {
            "pp": self.pp, "dp": self.dp, "tp": self.tp, "order": list(self.order),
            "dp_mode": self.dp_mode if self.dp > 1 else None,
            "mesh_dim_names": self.mesh_dim_names if self.uses_mesh else None,
        }
