"""The job's layout: which ranks form each pipeline replica, stage by stage.

A pipeline is the P ranks that hand activations to each other. A job may hold D data-parallel
replicas of it and T tensor-parallel ranks per stage (TP peers: one stage, several ranks).
P, D and T come from the job, never from how many files were given. Evidence, in order:

1. ``--layout pp=4,dp=2[,tp=2]`` (checked against the traces' process groups when they have
   them; rank order as in a DeviceMesh: the first dimension named is the outermost);
2. ``distributedInfo.pg_config`` in the trace headers: the pipeline groups are the process
   groups along the pipeline dimension (a DeviceMesh names them ``mesh_pp``; Megatron's
   ``PIPELINE_MODEL_PARALLEL_GROUP``), each listing its ranks in stage order; pipeline groups
   whose first ranks share a tensor-parallel group (``mesh_tp``) are one replica's TP peers;
3. the harness manifest (``layout``, ``pipelines``);
4. who sends to whom (:mod:`pipeaudit.timeline.peers`), when no rank's annotations name its
   stages: each pipeline in stage order from the timing of its point-to-point transfers,
   whatever the rank order (DeepSpeed's groups carry no names and put the pipe dimension
   outermost); among groups with no names, the one family the transfers chain;
5. the stage ids in the annotations: ranks that run the same stages are replicas of each
   other (the k-th lowest rank of each stage belongs to replica k);
6. the world size: one pipeline of every rank, in rank order.

Inconsistent evidence (a rank in two pipeline groups, groups of different sizes, a layout
that does not multiply to the world size) is a :class:`~pipeaudit.errors.ConfigError` naming
the ranks.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from pipeaudit.errors import ConfigError

#: Layouts of more ranks than this are not built (a header can claim any world size).
MAX_WORLD = 1 << 20
PP_GROUP_RE = re.compile(r"(?i)^(mesh_)?(pp|pipe|pipeline)$|pipeline")
TP_GROUP_RE = re.compile(r"(?i)^(mesh_)?tp$|tensor_model_parallel|tensor_parallel")
LAYOUT_DIMS = ("pp", "dp", "tp")


@dataclass(frozen=True)
class Layout:
    """Pipeline replicas of a job: ``replicas[d][p]`` are the ranks (TP peers) of stage
    position ``p`` in replica ``d``."""

    pp: int
    dp: int
    tp: int
    replicas: tuple[tuple[tuple[int, ...], ...], ...]
    source: str
    world_size: int | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    #: the ranks' process groups show a grid that nothing names or places: this layout (every
    #: rank one pipeline) is a guess, and a reading from the ops on it is uncertain
    guessed: bool = False

    @property
    def ranks(self) -> list[int]:
        """Every rank of every replica, sorted."""
        return sorted(r for rep in self.replicas for pos in rep for r in pos)

    def position(self, rank: int) -> tuple[int, int, int] | None:
        """(replica, stage position, index among the position's TP peers) of ``rank``."""
        return self._positions.get(rank)

    @cached_property
    def _positions(self) -> dict[int, tuple[int, int, int]]:
        """rank -> (replica, stage position, TP index), the first place a rank appears."""
        out: dict[int, tuple[int, int, int]] = {}
        for d, rep in enumerate(self.replicas):
            for p, peers in enumerate(rep):
                for t, r in enumerate(peers):
                    out.setdefault(r, (d, p, t))
        return out

    def replica_ranks(self, replica: int) -> list[int]:
        """The ranks of one replica, in stage order (TP peers together)."""
        return [r for peers in self.replicas[replica] for r in peers]

    def describe(self) -> str:
        """e.g. ``pp=4 x dp=2 (pg_config)``."""
        dims = [f"pp={self.pp}"] + [f"{n}={v}" for n, v in (("dp", self.dp), ("tp", self.tp)) if v > 1]
        return " x ".join(dims) + f" (from {self.source})"

    def to_dict(self) -> dict[str, Any]:
        return {"pp": self.pp, "dp": self.dp, "tp": self.tp, "source": self.source,
                "world_size": self.world_size,
                "replicas": [[list(peers) for peers in rep] for rep in self.replicas]}


def parse_layout(text: str) -> dict[str, int]:
    """``"pp=4,dp=2,tp=2"`` -> ordered {dim: size}; ConfigError when it is not that."""
    out: dict[str, int] = {}
    for item in text.split(","):
        name, sep, value = item.strip().partition("=")
        name = name.strip().lower()
        if not sep or name not in LAYOUT_DIMS or name in out:
            raise ConfigError(f"{text!r}: expected dimensions pp, dp, tp as NAME=SIZE "
                              "(e.g. pp=4,dp=2), each once")
        try:
            size = int(value)
        except ValueError:
            raise ConfigError(f"{text!r}: {name} must be an integer") from None
        if size < 1:
            raise ConfigError(f"{text!r}: {name} must be >= 1")
        out[name] = size
    if "pp" not in out:
        raise ConfigError(f"{text!r} needs pp=SIZE")
    total = 1
    for size in out.values():
        total *= size
    if total > MAX_WORLD:
        raise ConfigError(f"{text!r} holds {total} ranks, more than the {MAX_WORLD} pipeaudit reads")
    return out


def layout_from_dims(dims: Mapping[str, int], world_size: int | None, source: str) -> Layout:
    """The replicas of a DeviceMesh with these dims (first = outermost), row-major ranks."""
    names = list(dims)
    sizes = [dims[n] for n in names]
    total = 1
    for s in sizes:
        total *= s
    if world_size is not None and total != world_size:
        raise ConfigError(f"layout {_dims_text(dims)} holds {total} ranks but the traces' world "
                          f"size is {world_size}")
    strides = {}
    acc = 1
    for n in reversed(names):
        strides[n] = acc
        acc *= dims[n]
    pp, dp, tp = dims.get("pp", 1), dims.get("dp", 1), dims.get("tp", 1)

    def rank(p: int, d: int, t: int) -> int:
        return p * strides.get("pp", 0) + d * strides.get("dp", 0) + t * strides.get("tp", 0)

    replicas = tuple(tuple(tuple(rank(p, d, t) for t in range(tp)) for p in range(pp))
                     for d in range(dp))
    return Layout(pp, dp, tp, replicas, source, world_size)


def _dims_text(dims: Mapping[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in dims.items())


def _ranks_of(group: Mapping[str, Any]) -> list[int] | None:
    ranks = group.get("ranks")
    if isinstance(ranks, str):
        ranks = [t for t in re.split(r"[\[\],\s]+", ranks) if t]
    if not isinstance(ranks, list):
        return None
    try:
        out = [int(r) for r in ranks]
    except (TypeError, ValueError):
        return None
    return out if out and len(set(out)) == len(out) else None


def process_groups(headers: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every process group the headers' ``distributedInfo.pg_config`` lists (once each)."""
    seen: dict[tuple, dict[str, Any]] = {}
    for h in headers:
        info = h.get("distributedInfo") if isinstance(h, Mapping) else None
        groups = info.get("pg_config") if isinstance(info, Mapping) else None
        if not isinstance(groups, list):
            continue
        for g in groups:
            if not isinstance(g, Mapping):
                continue
            ranks = _ranks_of(g)
            if ranks is None:
                continue
            desc = str(g.get("pg_desc") or "")
            key = (str(g.get("pg_name")), desc, tuple(ranks))
            seen.setdefault(key, {"name": str(g.get("pg_name")), "desc": desc, "ranks": ranks})
    return list(seen.values())


def layout_from_groups(groups: Sequence[Mapping[str, Any]], world_size: int | None) -> Layout | None:
    """Pipeline replicas from the pipeline (and tensor-parallel) process groups, or None."""
    pp_groups = [g["ranks"] for g in groups if PP_GROUP_RE.search(g["desc"])]
    if not pp_groups:
        return None
    pp_groups = sorted({tuple(r) for r in pp_groups}, key=min)
    sizes = {len(g) for g in pp_groups}
    if len(sizes) > 1:
        raise ConfigError("the traces' pipeline process groups differ in size: "
                          + "; ".join(f"ranks {list(g)}" for g in pp_groups[:4]))
    owner: dict[int, tuple[int, ...]] = {}
    for g in pp_groups:
        for r in g:
            if r in owner:
                raise ConfigError(f"rank {r} is in two pipeline process groups: "
                                  f"{list(owner[r])} and {list(g)}")
            owner[r] = g
    tp_of: dict[int, tuple[int, ...]] = {}
    for g in groups:
        if TP_GROUP_RE.search(g["desc"]):
            for r in g["ranks"]:
                tp_of[r] = tuple(g["ranks"])
    by_replica: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
    for g in pp_groups:
        by_replica.setdefault(tp_of.get(g[0], g), []).append(g)
    replicas = []
    for peers_groups in sorted(by_replica.values(), key=lambda gs: min(min(g) for g in gs)):
        peers_groups = sorted(peers_groups, key=lambda g: g[0])
        replicas.append(tuple(tuple(g[p] for g in peers_groups) for p in range(len(peers_groups[0]))))
    tps = {len(rep[0]) for rep in replicas}
    if len(tps) > 1:
        raise ConfigError("the traces' tensor-parallel groups give replicas different numbers of "
                          "ranks per stage")
    return Layout(len(pp_groups[0]), len(replicas), tps.pop(), tuple(replicas), "pg_config", world_size)


def layout_from_manifest(manifest: Mapping[str, Any] | None, world_size: int | None) -> Layout | None:
    """The harness manifest's ``pipelines`` (per replica, its ranks in stage order; an entry
    may list a stage's TP peers), or None."""
    if not manifest:
        return None
    pipes = manifest.get("pipelines")
    if not isinstance(pipes, list) or not pipes:
        return None
    replicas = []
    for pipe in pipes:
        if not isinstance(pipe, list) or not pipe:
            return None
        rep = []
        for pos in pipe:
            peers = pos if isinstance(pos, list) else [pos]
            if not all(isinstance(r, int) and not isinstance(r, bool) for r in peers):
                return None
            rep.append(tuple(peers))
        replicas.append(tuple(rep))
    pps, tps = {len(r) for r in replicas}, {len(p) for r in replicas for p in r}
    if len(pps) != 1 or len(tps) != 1:
        return None
    return Layout(pps.pop(), len(replicas), tps.pop(), tuple(replicas), "manifest", world_size)


def layout_from_stages(rank_stages: Mapping[int, frozenset[int]], world_size: int | None) -> Layout | None:
    """Replicas from the stage ids the annotations give each rank, or None when that says
    nothing (no rank with stages, or every rank runs different stages)."""
    by_stages: dict[frozenset[int], list[int]] = {}
    for r, st in rank_stages.items():
        if st:
            by_stages.setdefault(st, []).append(r)
    if not by_stages:
        return None
    counts = {len(v) for v in by_stages.values()}
    if counts == {1}:
        return None  # one pipeline: nothing beyond the world size
    if len(counts) > 1:
        return None  # ranks missing from some replica: the replicas cannot be told apart
    positions = sorted(by_stages.items(), key=lambda kv: min(kv[0]))
    n = counts.pop()
    replicas = tuple(tuple((sorted(ranks)[d],) for _, ranks in positions) for d in range(n))
    return Layout(len(positions), n, 1, replicas, "stage ids in the annotations", world_size,
                  notes=("ranks that run the same stages were taken as data-parallel replicas "
                         "(the k-th lowest rank of each stage in replica k); give --layout if "
                         "they are tensor-parallel peers",))


def layout_from_peers(peers: Sequence[tuple[int, ...]] | None, ranks: Sequence[int],
                      world_size: int | None) -> Layout | None:
    """Pipeline replicas from who sends to whom (each pipeline's ranks in stage order), or
    None when they do not cover every rank of the job."""
    if not peers:
        return None
    members = sorted(r for chain in peers for r in chain)
    if members != sorted(set(ranks)) or (world_size is not None and len(members) != world_size):
        return None
    replicas = tuple(tuple((r,) for r in chain) for chain in peers)
    return Layout(len(peers[0]), len(peers), 1, replicas, "point-to-point peers", world_size)


def detect_layout(*, headers: Sequence[Mapping[str, Any]], ranks: Sequence[int],
                  world_size: int | None, manifest: Mapping[str, Any] | None = None,
                  rank_stages: Mapping[int, frozenset[int]] | None = None,
                  spec: str | None = None,
                  peers: Callable[[Sequence[Mapping[str, Any]]], Sequence[tuple[int, ...]] | None]
                  | None = None) -> Layout:
    """The layout from the evidence named in the module docstring. ``peers`` finds the
    pipelines from who sends to whom, given the headers' process groups to choose among
    (:func:`~pipeaudit.timeline.peers.pipelines_from_peers`, quadratic in ranks): called only
    when the groups' names, the manifest and the stage ids do not give the layout."""
    groups = process_groups(headers)
    from_groups = layout_from_groups(groups, world_size)
    if spec is not None:
        given = layout_from_dims(parse_layout(spec), world_size, "--layout")
        if from_groups is not None and sorted(map(sorted, _pipelines(given))) != sorted(
                map(sorted, _pipelines(from_groups))):
            raise ConfigError(f"layout {spec} does not match the traces' pipeline process groups "
                              f"({', '.join(str(list(p)) for p in _pipelines(from_groups)[:4])})")
        return given
    if from_groups is not None:
        return from_groups
    from_manifest = layout_from_manifest(manifest, world_size)
    if from_manifest is not None:
        return from_manifest
    # who sends to whom places ranks whose stage the trace does not name; stage ids, where
    # the annotations give them, place every rank already (and tell a V's two ends apart)
    from_peers = None
    if not any((rank_stages or {}).values()):
        from_peers = layout_from_peers(peers(groups) if peers else None, ranks, world_size)
    if from_peers is not None:
        return from_peers
    from_stages = layout_from_stages(rank_stages or {}, world_size)
    if from_stages is not None:
        return from_stages
    _refuse_unnamed_subgroups(groups, ranks, world_size)
    if world_size is not None and 0 < world_size <= MAX_WORLD and all(r < world_size for r in ranks):
        unnamed = any(g["desc"] in ("", "undefined") and 1 < len(g["ranks"]) < world_size
                      for g in groups)
        return Layout(world_size, 1, 1, (tuple((r,) for r in range(world_size)),), "world size",
                      world_size, guessed=unnamed)
    members = sorted(set(ranks))
    return Layout(len(members), 1, 1, (tuple((r,) for r in members),), "ranks given", None)


def _refuse_unnamed_subgroups(groups: Sequence[Mapping[str, Any]], ranks: Sequence[int],
                              world_size: int | None) -> None:
    """Some of the job's ranks given, in groups that carry no names (DeepSpeed's), one of which
    holds more than one rank and fewer than all: the pipeline may be any of them, so the world
    size says nothing about P. A ConfigError asks for ``--layout`` or every rank's trace."""
    if world_size is None or len(set(ranks)) >= world_size:
        return
    given = set(ranks)
    unnamed = sorted({tuple(g["ranks"]) for g in groups
                      if g["desc"] in ("", "undefined") and 1 < len(g["ranks"]) < world_size
                      and given & set(g["ranks"])})
    if unnamed:
        shown = ", ".join(str(list(g)) for g in unnamed[:4])
        raise ConfigError(
            f"rank(s) {', '.join(map(str, sorted(given)))} of {world_size} cannot say which ranks "
            f"form their pipeline: their process groups carry no names and more than one could "
            f"be it ({shown}); give --layout (e.g. pp=2,dp=2, the outermost dimension first) or "
            f"every rank's trace")


def _pipelines(layout: Layout) -> list[tuple[int, ...]]:
    """Each (replica, TP index) pipeline's ranks in stage order."""
    return [tuple(pos[t] for pos in rep) for rep in layout.replicas for t in range(len(rep[0]))]
