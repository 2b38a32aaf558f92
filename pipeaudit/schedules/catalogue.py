"""The schedule catalogue: one definition per schedule, used by the analysis and the harness.

Each :class:`ScheduleDef` names its placement, its chunk rule, the torch class that runs it (if
any) and whether the harness can run it, its per-rank order builder, its constraints, its
closed form and its published formula. ``pipeaudit.harness.catalog`` is a view of the entries
the harness can run. Where torch 2.13 implements a schedule the order is the one torch
*executes* and the constraints are the ones torch enforces
(``tests/unit/schedules/test_schedules_torch.py``,
``tests/unit/harness/test_harness_catalog.py``); the rules are restated in ``docs/schedules.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from pipeaudit.errors import ScheduleError
from pipeaudit.schedules import block_library as blk
from pipeaudit.schedules import closed_forms as cf
from pipeaudit.schedules import orders as od
from pipeaudit.schedules import published as pub
from pipeaudit.schedules.model import Schedule, as_orders, flatten_steps, loop_placement, v_placement

#: The torch code that executes each torch schedule: PipelineScheduleSingle's own loop, or
#: the action runtime (SEND/RECV actions and per-action bookkeeping) that the multi-stage
#: schedules run on. Their host overhead per action differs (docs/explain.md).
SINGLE_LOOP, ACTION_RUNTIME = "PipelineScheduleSingle", "_PipelineScheduleRuntime"


@dataclass(frozen=True)
class Terms:
    """How a constraint message names P, M and v: ``P``/``M``/``v`` for the analysis,
    ``--ranks``/``--microbatches``/``--chunks`` for the harness."""

    P: str = "P"
    M: str = "M"
    v: str = "v"

    def show(self, which: str, value: object) -> str:
        label = getattr(self, which)
        return f"{label}={value}" if len(label) == 1 else f"{label} {value}"


ANALYSIS = Terms()
HARNESS = Terms("--ranks", "--microbatches", "--chunks")

#: A constraint: (name, P, M, v, terms) -> the problem in one sentence, or None.
Check = Callable[[str, int, int, int, Terms], "str | None"]


def _m_at_least_p(name: str, P: int, M: int, v: int, t: Terms) -> str | None:
    if M >= P:
        return None
    return (f"schedule {name} needs at least as many microbatches as ranks (M >= P), as torch's "
            f"Schedule1F1B requires; got {t.show('M', M)}, {t.show('P', P)}")


def _m_at_least_2p(name: str, P: int, M: int, v: int, t: Terms) -> str | None:
    if M >= 2 * P:
        return None
    return (f"schedule {name} needs at least as many microbatches as stages (M >= 2P = {2 * P}), "
            f"as torch's ScheduleDualPipeV requires; got {t.show('M', M)} < 2 x {t.show('P', P)}")


def _m_multiple_of_rounds(name: str, P: int, M: int, v: int, t: Terms) -> str | None:
    rounds = max(1, M // P)
    if M % rounds == 0:
        return None
    ok = sorted({x for x in range(1, 4 * P + 1) if x % max(1, x // P) == 0})
    return (f"schedule {name} needs M to be a multiple of max(1, M // P) = {rounds} (torch's "
            f"rounds of flexible interleaving); got {t.show('M', M)} with {t.show('P', P)}; "
            f"valid M for P={P} include {', '.join(map(str, ok[:12]))}, ...")


def _v_at_least_2(name: str, P: int, M: int, v: int, t: Terms) -> str | None:
    if v >= 2:
        return None
    return (f"schedule {name} interleaves several stages per rank: {t.show('v', v)} must be at "
            "least 2 (with one stage per rank it is 1f1b)")


@dataclass(frozen=True)
class ScheduleDef:
    """Everything pipeaudit knows about one schedule."""

    name: str
    description: str
    placement: str  #: "loop" (stage s on rank s % P) or "v" (rank r holds r and 2P-1-r)
    fixed_chunks: int | None  #: stages per rank the schedule requires, if any
    default_chunks: int
    orders: Callable[[int, int, int, int], list]  #: (P, M, v, rank) -> order (od.Step items)
    theory: Callable[[cf.Inputs], cf.Theory]
    kinds: tuple[str, ...]  #: compute action kinds the schedule runs
    aliases: tuple[str, ...] = ()
    torch_class: str | None = None  #: the torch.distributed.pipelining class that runs it
    harness_class: str | None = None  #: what the harness instantiates (torch's, or "naive")
    torch_annotates: bool = False  #: torch wraps each action in record_function("PP:...")
    checks: tuple[Check, ...] = ()
    #: constraints of torch's class alone, checked for the harness (``HARNESS`` terms) only: the
    #: schedule itself is defined beyond them (DeepSpeed and Megatron-core run 1F1B with M < P)
    torch_checks: tuple[Check, ...] = ()
    published: Callable[[cf.Inputs, cf.Theory], "pub.Published | None"] | None = None
    summary: str = ""  #: the harness's one-line help text
    block: str | None = None  #: the named building block it is built from, if any
    #: whether its theory gives a closed-form bubble (else the replay gives it)
    closed_form: bool = True

    @property
    def split_backward(self) -> bool:
        return "I" in self.kinds

    @property
    def runtime(self) -> str | None:
        """:data:`SINGLE_LOOP` or :data:`ACTION_RUNTIME` for a torch schedule, else None."""
        if self.torch_class is None:
            return None
        return SINGLE_LOOP if self.torch_class in ("ScheduleGPipe", "Schedule1F1B") else ACTION_RUNTIME

    @property
    def multi_stage(self) -> bool:
        """True when the harness builds it from a list of stages (runtime schedules)."""
        return self.harness_class is not None and self.runtime != SINGLE_LOOP

    def placement_of(self, num_ranks: int, chunks: int) -> tuple[int, ...]:
        return v_placement(num_ranks) if self.placement == "v" else loop_placement(num_ranks, chunks)


def _def(**kw) -> ScheduleDef:
    return ScheduleDef(**kw)


_ENTRIES: tuple[ScheduleDef, ...] = (
    _def(name="naive", aliases=("sequential",), placement="loop", fixed_chunks=1, default_chunks=1,
         description="one microbatch at a time through all stages, no overlap between microbatches",
         summary="one microbatch at a time through the whole pipeline, F then B; bubble (P-1)/P",
         orders=od.naive, theory=cf.naive, kinds=("F", "B"), harness_class="naive",
         torch_annotates=True),
    _def(name="gpipe", aliases=("filldrain",), placement="loop", fixed_chunks=1, default_chunks=1,
         description="fill-drain: all forwards, then all backwards",
         summary="all forwards, then all backwards (fill-drain)",
         orders=od.gpipe, theory=cf.gpipe, published=pub.gpipe, kinds=("F", "B"),
         torch_class="ScheduleGPipe", harness_class="ScheduleGPipe"),
    _def(name="1f1b", aliases=("pipedreamflush",), placement="loop", fixed_chunks=1,
         default_chunks=1,
         description="P-s warm-up forwards on stage s, then one backward / one forward (also "
                     "DeepSpeed's TrainSchedule and Megatron-core's schedule without virtual "
                     "stages)",
         summary="warm-up forwards, then one forward one backward, then cool-down",
         orders=od.one_f_one_b, theory=cf.one_f_one_b, published=pub.one_f_one_b,
         kinds=("F", "B"), torch_class="Schedule1F1B", harness_class="Schedule1F1B",
         torch_checks=(_m_at_least_p,)),
    _def(name="eager-1f1b", placement="loop", fixed_chunks=1, default_chunks=1,
         description="1F1B with 2(P-s)-1 warm-up forwards (room to overlap P2P)",
         orders=od.eager_1f1b, theory=cf.eager_1f1b, kinds=("F", "B")),
    _def(name="delayed-backward", aliases=("1f1b-loop",), placement="loop", fixed_chunks=1,
         default_chunks=1,
         description="the single-process teaching loop: forward of microbatch i through every "
                     "stage, then backward of i-1; every stage runs F0, then F(i) B(i-1), then "
                     "the last B",
         orders=od.delayed_backward, theory=cf.delayed_backward, kinds=("F", "B"),
         closed_form=False),
    _def(name="interleaved-1f1b", aliases=("interleaved",), placement="loop", fixed_chunks=None,
         default_chunks=2,
         description="Megatron interleaved 1F1B over v chunks, loop placement",
         summary="1F1B over v model chunks per rank (depth first)",
         orders=od.interleaved_1f1b, theory=cf.interleaved_1f1b, published=pub.interleaved_1f1b,
         kinds=("F", "B"), torch_class="ScheduleInterleaved1F1B",
         harness_class="ScheduleInterleaved1F1B", torch_annotates=True,
         checks=(_m_multiple_of_rounds,)),
    _def(name="looped-bfs", aliases=("bfs",), placement="loop", fixed_chunks=None, default_chunks=2,
         description="breadth-first: all microbatches per local stage, loop placement",
         summary="breadth first over v chunks per rank: all microbatches of a chunk at once",
         orders=od.looped_bfs, theory=cf.looped_bfs, kinds=("F", "B"),
         torch_class="ScheduleLoopedBFS", harness_class="ScheduleLoopedBFS", torch_annotates=True),
    _def(name="zb-h1", placement="loop", fixed_chunks=1, default_chunks=1,
         description="zero bubble ZB-H1: 1F1B memory, W passes deferred into the bubbles",
         orders=od.zb_h1, theory=cf.zb_h1, published=pub.zb_h1, kinds=("F", "I", "W")),
    _def(name="zb-h2", placement="loop", fixed_chunks=1, default_chunks=1,
         description="zero bubble ZB-H2: 2(P-s)-1 warm-up forwards, W passes deferred",
         orders=od.zb_h2, theory=cf.zb_h2, published=pub.zb_h2, kinds=("F", "I", "W")),
    _def(name="interleaved-zb", aliases=("interleavedzerobubble", "zb1p"), placement="loop",
         fixed_chunks=None, default_chunks=2,
         description="torch ScheduleInterleavedZeroBubble (ZB1P) over v chunks",
         summary="interleaved zero bubble (ZB1P): backward split into I and W, W fills bubbles",
         orders=od.interleaved_zb, theory=cf.zb_h1, published=pub.interleaved_zb,
         kinds=("F", "I", "W"), torch_class="ScheduleInterleavedZeroBubble",
         harness_class="ScheduleInterleavedZeroBubble", torch_annotates=True,
         checks=(_m_multiple_of_rounds,)),
    _def(name="zbv", aliases=("zbvzerobubble",), placement="v", fixed_chunks=2, default_chunks=2,
         description="zero bubble ZB-V, V placement, two chunks per rank",
         summary="zero bubble V: two chunks per rank in a V, F/I/W",
         orders=od.zbv, theory=cf.zbv, published=pub.zbv, kinds=("F", "I", "W"),
         torch_class="ScheduleZBVZeroBubble", harness_class="ScheduleZBVZeroBubble",
         torch_annotates=True),
    _def(name="dualpipev", placement="v", fixed_chunks=2, default_chunks=2,
         description="DualPipeV, V placement, overlapped F+B pairs run as torch runs them",
         summary="DualPipeV: V placement, overlapped F+B pairs (OVERLAP_F_B), some I/W",
         orders=od.dualpipev, theory=cf.dualpipev, published=pub.dualpipev,
         kinds=("F", "B", "I", "W"), torch_class="ScheduleDualPipeV",
         harness_class="ScheduleDualPipeV", torch_annotates=True, checks=(_m_at_least_2p,)),
    # built from building blocks (Qi et al. 2024): pipeaudit.schedules.block_library
    _def(name="1f1b-v", placement="v", fixed_chunks=2, default_chunks=2,
         description="1F1B-V: V placement, no B/W split, built from a building block",
         block="1f1b-v", orders=blk.catalogue_orders("1f1b-v"), kinds=("F", "B"),
         theory=cf.block_built("every rank peaks at ceil((2P+1)/3) microbatches (about 2/3 of "
                               "1F1B's P), as the authors' 1F1B-V implementation does")),
    _def(name="1f1b-split-lowmem", placement="loop", fixed_chunks=1, default_chunks=1,
         description="1F1B with B/W split, two microbatches per building block, 2/3 of 1F1B's "
                     "memory",
         block="1f1b-split-lowmem", orders=blk.catalogue_orders("1f1b-split-lowmem"),
         kinds=("F", "I", "W"),
         theory=cf.block_built("stage s peaks at ceil(2(P-s)/3) microbatches, 2/3 of 1F1B's "
                               "P-s (the source: 2/3 of 1F1B's activation memory)")),
    _def(name="interleaved-1f1b-lowmem", placement="loop", fixed_chunks=None, default_chunks=2,
         description="interleaved 1F1B repeated one microbatch at a time: lower memory",
         block="interleaved-1f1b-lowmem", orders=blk.catalogue_orders("interleaved-1f1b-lowmem"),
         kinds=("F", "B"),
         checks=(_v_at_least_2,),
         theory=cf.block_built("a chunk holds a microbatch for about one block, so a rank "
                               "peaks well below interleaved 1F1B (the source: 'lower memory')")),
)

CATALOGUE: dict[str, ScheduleDef] = {d.name: d for d in _ENTRIES}

SCHEDULE_NAMES: tuple[str, ...] = tuple(CATALOGUE)

#: torch.distributed.pipelining class for the schedules torch implements
TORCH_CLASSES: dict[str, str] = {d.name: d.torch_class for d in _ENTRIES if d.torch_class}

#: one-line description per schedule, shown by the CLI and the docs
DESCRIPTIONS: dict[str, str] = {d.name: d.description for d in _ENTRIES}


def _key(name: str) -> str:
    key = "".join(ch for ch in name.lower() if ch not in "-_ ")
    return key[len("schedule"):] if key.startswith("schedule") else key


#: normalised alias (lower case, no '-', '_', spaces or leading 'Schedule') -> canonical name
_ALIASES: dict[str, str] = {}
for _d in _ENTRIES:
    for _a in (_d.name, *_d.aliases, *((_d.torch_class,) if _d.torch_class else ())):
        _ALIASES.setdefault(_key(_a), _d.name)


def canonical_name(name: str) -> str:
    """Resolve a schedule name, alias or torch class name (case, '-', '_', spaces and a
    leading 'Schedule' ignored)."""
    try:
        return _ALIASES[_key(name)]
    except KeyError:
        raise ScheduleError(
            f"unknown schedule {name!r}; known schedules: {', '.join(CATALOGUE)}"
        ) from None


def get_def(name: str) -> ScheduleDef:
    """The catalogue entry of ``name`` (any alias); ScheduleError when unknown."""
    return CATALOGUE[canonical_name(name)]


def torch_runtime(name: str) -> str | None:
    """:data:`SINGLE_LOOP` or :data:`ACTION_RUNTIME` for a schedule torch implements, else None."""
    entry = CATALOGUE.get(name)
    return entry.runtime if entry else None


def default_chunks(name: str) -> int:
    """Stages per rank used when the caller gives none."""
    return get_def(name).default_chunks


def free_chunks(name: str) -> bool:
    """True when the schedule's number of stages per rank is the caller's choice."""
    return get_def(name).fixed_chunks is None


def chunks_for(name: str, v: int) -> int | None:
    """The chunk count to build ``name`` with for a run of ``v`` stages per rank: ``v`` itself,
    but None (the schedule's own) at one stage per rank for a schedule of fixed chunks (a
    one-stage schedule, or ZBV's two). A schedule of free chunks at one chunk is built with one
    (looped BFS over one chunk is not its default two)."""
    return v if v > 1 or free_chunks(name) else None


def config_problem(name: str, num_ranks: int, num_microbatches: int, chunks: int,
                   terms: Terms = ANALYSIS) -> str | None:
    """Why schedule ``name`` (canonical) cannot run with (P, M, v), in one sentence; None if
    it can. ``terms`` names P, M and v the way the caller's user gave them."""
    entry = CATALOGUE[name]
    for which, value in (("P", num_ranks), ("M", num_microbatches), ("v", chunks)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            return f"{getattr(terms, which)} must be an integer >= 1, got {value!r}"
    v = chunks
    if entry.fixed_chunks == 1 and v != 1:
        return f"schedule {name} runs one stage per rank: {terms.v} must be 1, got {v}"
    if entry.fixed_chunks is not None and v != entry.fixed_chunks:
        return (f"schedule {name} needs exactly {entry.fixed_chunks} stages per rank "
                f"({entry.placement.upper()} placement): {terms.v} must be "
                f"{entry.fixed_chunks}, got {v}")
    checks = entry.checks + (entry.torch_checks if terms is HARNESS else ())
    for check in checks:
        problem = check(name, num_ranks, num_microbatches, v, terms)
        if problem:
            return problem
    return None


def check_config(name: str, num_ranks: int, num_microbatches: int, chunks: int) -> None:
    """Raise :class:`ScheduleError` if ``name`` cannot run with (P, M, v)."""
    problem = config_problem(canonical_name(name), num_ranks, num_microbatches, chunks)
    if problem:
        raise ScheduleError(problem)


def build_schedule(
    name: str, num_ranks: int, num_microbatches: int, chunks: int | None = None
) -> Schedule:
    """Build the catalogue schedule ``name`` for P ranks, M microbatches and v chunks.

    Raises :class:`ScheduleError` for unknown names and invalid combinations.
    """
    return _build(*checked_config(name, num_ranks, num_microbatches, chunks))


def checked_config(name: str, num_ranks: int, num_microbatches: int,
                   chunks: int | None) -> tuple[str, int, int, int]:
    """(canonical name, P, M, v) of a buildable configuration; :class:`ScheduleError` else."""
    canon = canonical_name(name)
    v = default_chunks(canon) if chunks is None else chunks
    check_config(canon, num_ranks, num_microbatches, v)
    return canon, num_ranks, num_microbatches, v


@lru_cache(maxsize=512)
def _build(canon: str, P: int, M: int, v: int) -> Schedule:
    entry = CATALOGUE[canon]
    orders, pairs = [], []
    for r in range(P):
        flat, rank_pairs = flatten_steps(entry.orders(P, M, v, r))
        orders.append(flat)
        pairs += rank_pairs
    return Schedule(
        name=canon,
        num_ranks=P,
        num_microbatches=M,
        chunks=v,
        placement=entry.placement_of(P, v),
        orders=as_orders(orders),
        split_backward=entry.split_backward,
        pairs=frozenset(pairs),
    )
