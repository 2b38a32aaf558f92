"""Checks that a set of rank traces belongs together. Errors raise TraceError; the rest are
returned as warnings.

Rules (messages verbatim, ``{...}`` filled in):

* Several files without any rank (no ``distributedInfo.rank``, no rank in the name):
  error ``cannot tell the ranks apart: {a}, {b} have no distributedInfo.rank and no rank in
  their file names``.
* The same rank twice: error ``rank {r} is in two files: {a} and {b} (several profiling
  cycles or runs? pass one file per rank)``.
* Different runs: error ``traces come from different runs: world_size {w1} in {a}, {w2} in
  {b}`` (likewise ``backend``); and, on wall-clock traces, ranks whose time spans do not
  overlap and lie more than max(60 s, 10 × the longest span) apart: ``traces come from
  different runs or profiling windows: ranks {..} ({t0} to {t1}) and rank {r} ({t2} to {t3})
  are {gap} apart``. Different ``pg_count`` / ``nccl_version``: a warning.
* A rank that is not below the world size: error ``rank {r} ({file}) is not below
  world_size {w}``.
* Missing ranks. With world size W (from distributedInfo, else the manifest's
  ``world_size`` or ``num_ranks``) and the given ranks G:

  - holes *between* given ranks (e.g. 0 and 2 of 4 given): an error unless
    ``allow_missing``: ``world_size is 4 but only ranks 0, 2 were given; missing ranks 1, 3
    (pass allow_missing=True, or --allow-missing, to analyse an incomplete set)``;
  - a contiguous block of ranks (one rank of 300; ranks 0-1 of 128; the first stages of a
    pipeline): a warning, ``only 1 of 300 ranks given (rank 34)`` or ``world_size is 128 but
    only ranks 0, 1 were given; missing ranks 2-127``. A contiguous block is what one
    deliberately picks (one node, one pipeline); a hole usually means a lost file.
  - without a world size, holes between given ranks are checked the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

from pipeaudit.errors import TraceError, TraceErrorKind as Kind
from pipeaudit.trace.clock import format_duration, format_ns, is_wall_clock, time_clusters
from pipeaudit.trace.model import RankTrace

MIN_RUN_GAP_NS = 60 * 10**9
RUN_GAP_FACTOR = 10


def format_ranks(ranks: Sequence[int]) -> str:
    """``[0, 1, 2, 3, 7, 9]`` -> ``"0-3, 7, 9"`` (runs of three or more are shortened)."""
    rs = sorted(set(ranks))
    parts: list[str] = []
    i = 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        if j - i >= 2:
            parts.append(f"{rs[i]}-{rs[j]}")
        else:
            parts.extend(str(r) for r in rs[i : j + 1])
        i = j + 1
    return ", ".join(parts)


def missing_gaps(given: Sequence[int], lo: int, hi: int) -> list[tuple[int, int]]:
    """Inclusive ranges of the integers in [lo, hi] that are not in ``given``."""
    out: list[tuple[int, int]] = []
    prev = lo - 1
    for g in sorted(set(given)) + [hi + 1]:
        if g > prev + 1:
            out.append((prev + 1, min(g - 1, hi)))
        prev = max(prev, g)
    return [(a, b) for a, b in out if a <= b]


def format_gaps(gaps: Sequence[tuple[int, int]]) -> str:
    """Ranges as :func:`format_ranks` writes them: ``[(1, 1), (3, 9)]`` -> ``"1, 3-9"``."""
    parts: list[str] = []
    for a, b in gaps:
        if b - a >= 2:
            parts.append(f"{a}-{b}")
        else:
            parts.extend(str(r) for r in range(a, b + 1))
    return ", ".join(parts)


def _label(ranks: Sequence[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {format_ranks(ranks)}"


def _check_rank_info(ranks: Sequence[RankTrace]) -> None:
    if len(ranks) < 2:
        return
    unknown = [rt for rt in ranks if rt.rank_source == "default"]
    if unknown:
        names = ", ".join(str(rt.path) for rt in unknown[:4])
        more = f" and {len(unknown) - 4} more" if len(unknown) > 4 else ""
        raise TraceError(
            None,
            f"cannot tell the ranks apart: {names}{more} "
            f"{'has' if len(unknown) == 1 else 'have'} no distributedInfo.rank and no rank in "
            f"{'its file name' if len(unknown) == 1 else 'their file names'}",
            Kind.SET)
    by_rank: dict[int, RankTrace] = {}
    for rt in ranks:
        other = by_rank.get(rt.rank)
        if other is not None:
            raise TraceError(
                None,
                f"rank {rt.rank} is in two files: {other.path} and {rt.path} "
                "(several profiling cycles or runs? pass one file per rank)",
                Kind.SET)
        by_rank[rt.rank] = rt


def _check_same_run(ranks: Sequence[RankTrace], warnings: list[str]) -> None:
    def first_disagreement(get, label: str, fatal: bool) -> None:
        seen: dict[object, RankTrace] = {}
        for rt in ranks:
            v = get(rt)
            if v is not None and v not in seen:
                seen[v] = rt
        if len(seen) > 1:
            (v1, a), (v2, b) = list(seen.items())[:2]
            text = f"{label} {v1} in {a.path}, {v2} in {b.path}"
            if fatal:
                raise TraceError(None, f"traces come from different runs: {text}", Kind.SET)
            warnings.append(f"ranks disagree on {text}: traces from different runs?")

    def dist(key: str):
        def get(rt: RankTrace):
            info = rt.header.get("distributedInfo")
            value = info.get(key) if isinstance(info, dict) else None
            return value if isinstance(value, (int, str)) else None

        return get

    first_disagreement(lambda rt: rt.world_size, "world_size", True)
    first_disagreement(lambda rt: rt.backend, "backend", True)
    first_disagreement(dist("pg_count"), "pg_count", False)
    first_disagreement(dist("nccl_version"), "nccl_version", False)

    wall = [rt for rt in ranks if is_wall_clock(rt)]
    clusters = time_clusters(wall)
    if len(clusters) > 1:
        longest = max(rt.end_ns - rt.start_ns for rt in wall)  # type: ignore[operator]
        limit = max(MIN_RUN_GAP_NS, RUN_GAP_FACTOR * longest)
        for (s0, e0, r0), (s1, e1, r1) in zip(clusters, clusters[1:]):
            gap = s1 - e0
            if gap > limit:
                raise TraceError(
                    None,
                    "traces come from different runs or profiling windows: "
                    f"{_label(r0)} ({format_ns(s0)} to {format_ns(e0)}) and "
                    f"{_label(r1)} ({format_ns(s1)} to {format_ns(e1)}) are "
                    f"{format_duration(gap)} apart",
                    Kind.SET)


def _rank_word(ranks: Sequence[int]) -> str:
    return "rank" if len(set(ranks)) == 1 else "ranks"


def _check_missing(
    ranks: Sequence[RankTrace], world_size: int | None, allow_missing: bool, warnings: list[str]
) -> None:
    given = sorted(rt.rank for rt in ranks)
    if not given:
        return
    if world_size is not None:
        for rt in ranks:
            if rt.rank >= world_size:
                raise TraceError(None, f"rank {rt.rank} ({rt.path}) is not below world_size "
                                       f"{world_size}", Kind.SET)
        gaps = missing_gaps(given, 0, world_size - 1)
    else:
        gaps = missing_gaps(given, given[0], given[-1])
    if not gaps:
        return
    # (as ranges: a world_size of 2**40 must not become a list of 2**40 ranks)
    holes = any(given[0] < a <= b < given[-1] for a, b in gaps)
    n_missing = sum(b - a + 1 for a, b in gaps)
    missing_word = "rank" if n_missing == 1 else "ranks"
    if world_size is not None:
        if len(given) == 1:
            text = f"only 1 of {world_size} ranks given (rank {given[0]})"
        else:
            text = (
                f"world_size is {world_size} but only {_rank_word(given)} {format_ranks(given)} "
                f"{'was' if len(given) == 1 else 'were'} given; missing {missing_word} "
                f"{format_gaps(gaps)}"
            )
    else:
        text = (
            f"{_rank_word(given)} {format_ranks(given)} were given but not "
            f"{missing_word} {format_gaps(gaps)} (the traces do not say their world_size)"
        )
    if holes and not allow_missing:
        raise TraceError(
            None, text + " (pass allow_missing=True, or --allow-missing, to analyse an incomplete set)",
            Kind.SET)
    warnings.append(text)


def validate_set(
    ranks: Sequence[RankTrace], *, allow_missing: bool = False, manifest: dict | None = None
) -> list[str]:
    """Check that ``ranks`` form one run; return set-level warnings, raise TraceError."""
    warnings: list[str] = []
    _check_rank_info(ranks)
    _check_same_run(ranks, warnings)
    world_size = next((rt.world_size for rt in ranks if rt.world_size is not None), None)
    if world_size is None and manifest is not None:
        ws = manifest.get("world_size", manifest.get("num_ranks"))
        if isinstance(ws, int) and not isinstance(ws, bool) and ws >= 1:
            world_size = ws
    _check_missing(ranks, world_size, allow_missing, warnings)
    return warnings
