"""Infer F and B actions on traces that carry no per-action annotation.

torch's ``Schedule1F1B`` writes none, so its actions are read off the ops of the thread
that runs the schedule (the one that issues the point-to-point ``c10d::send``/``recv_``
ops), together with the autograd engine's ops wherever they run (on GPU the engine runs
backward on its own thread while the schedule's thread waits). Ops inside the optimizer's
own annotations and inside FSDP's hooks (:mod:`pipeaudit.timeline.framework_work`) are not
pipeline work.

1. The op sequence is cut into *blocks*: maximal runs of backward ops
   (``autograd::engine::evaluate_function: …``) or of other compute ops, separated by
   point-to-point ops and by switches between the two (collectives such as a
   tensor-parallel all-reduce belong to the block around them).
2. Every backward block is one B (a block that is the same backward several times over,
   op for op, is that many Bs, unless that gives more backwards than the stage has sends or
   recvs, whichever is more: every microbatch's input or output crosses the stage as a tensor
   of its own, so a block whose repeats outnumber them is one backward of a model whose
   layers repeat).
3. A stage runs the same ops for every microbatch, so its forward has one op sequence (its
   *signature*): the commonest sequence among the largest non-backward blocks. Every
   occurrence of it is one F, whatever stands around it (the split of the batch at the
   start of a step, bookkeeping such as ``aten::detach_``) and even when forwards follow
   each other with nothing between. There is one F per B (GPipe, 1F1B and naive hold one
   stage per rank and run every microbatch forward and backward once per step); when the
   signature does not give that many, the largest blocks are taken instead.
4. The ops that prepare a transfer's tensors right before it (a detach of the output to
   send, the allocation of a receive buffer: :data:`pipeaudit.timeline.ops.P2P_PREP_OPS`)
   are the transfer's: they end the block before them.

Microbatches are numbered by execution order (steps and microbatches are settled across
ranks later, :mod:`pipeaudit.timeline.stepping`). The share of the thread's compute that
lands in an action is the inference's *coverage*, reported with the result.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter, defaultdict
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import polars as pl

from pipeaudit.timeline.account import OpAccount
from pipeaudit.timeline.engine_calls import (ACCUMULATE, NO_GLUE, backward_actions, glue_classes,
                                             split_calls)
from pipeaudit.timeline.framework_work import framework_spans, inside
from pipeaudit.timeline.ops import RankOps
from pipeaudit.timeline.recognise import SPAN_SCHEMA


#: The op torch.distributed.pipelining splits the batch into microbatches with (first and
#: last stage, once per ``schedule.step()``).
SPLIT_OP = "aten::tensor_split"

_COMPUTE, _BACKWARD, _SEND, _RECV, _COMM, _EXCLUDED = range(6)
#: Kineto's step spans (``ProfilerStep#N``).
STEP_SPAN_PREFIX = "ProfilerStep#"
#: Blocks longer than this (ops) are not searched for repeated stretches (quadratic).
TANDEM_MAX_OPS = 2000


@dataclass
class Inferred:
    """What the ops say about one rank's actions."""

    spans: pl.DataFrame  #: SPAN_SCHEMA; microbatch = execution order of that kind on the rank
    compute_ns: int  #: compute on the pipeline thread (optimizer excluded)
    attributed_ns: int  #: ... of which inside an inferred action
    signature: str  #: "forward signature" | "forward ops" | "largest blocks" | "none"
    #: a block of one backward op sequence repeated k times was read as k backwards: the other
    #: reading (one backward of a stage whose layers repeat) is ``infer_actions(split=False)``
    split: bool = False
    #: the thread's compute ops that lie in no action (starts, ends, whether each scales
    #: gradients in place, its name's code; by start): gradient scaling, the step's start-up and wrap-up once
    #: steps are known (:mod:`pipeaudit.timeline.conservation`), else work the reading missed
    loose: tuple[np.ndarray, ...] = (np.empty(0, np.int64), np.empty(0, np.int64),
                                     np.empty(0, bool), np.empty(0, np.int64))
    #: why the reading is a guess between rival readings the ops support alike ("" where
    #: it is not): carried to the rank's doubts (:func:`pipeaudit.timeline.invariants.reading_doubts`)
    doubt: str = ""

    def account(self) -> OpAccount:
        """Where the thread's compute went, for :func:`~pipeaudit.timeline.conservation.settle_accounts`."""
        return OpAccount(self.compute_ns, self.attributed_ns, *self.loose)

    @property
    def coverage(self) -> float | None:
        """Share of the pipeline thread's compute that lands in an action."""
        return self.attributed_ns / self.compute_ns if self.compute_ns else None


def pipeline_thread(ops: RankOps) -> str | None:
    """The thread that runs the schedule: most point-to-point ops, else most backward ops,
    else most compute time."""
    top = ops.cpu_ops
    if top.height == 0:
        return None
    by_tid = top.group_by("tid").agg(
        np2p=pl.col("p2p").sum(), nb=pl.col("backward").sum(),
        busy=(pl.col("end") - pl.col("start")).sum(),
    ).sort(["np2p", "nb", "busy", "tid"], descending=[True, True, True, False])
    return str(by_tid["tid"][0])


def infer_actions(ops: RankOps, stage: int, split: bool = True, calls: bool = False) -> Inferred:
    """F/B action spans of one rank (one stage per rank), inferred from its ops. ``split``:
    whether a backward block that is one sequence k times over may be k backwards; ``calls``:
    the reading of a split backward (:mod:`pipeaudit.timeline.engine_calls`): engine calls with
    only glue between them are grouped into actions, each forward may have one or two of them
    (kind ``B`` for all: which are I and which W is the schedule's order to say,
    :mod:`pipeaudit.timeline.split_backward`), and a reading without an exact forward signature
    is none."""
    try:
        return _infer(ops, stage, split, calls)
    finally:  # the op sequences seen are this rank's: not kept past its reading
        _primitive.cache_clear()
        _bag.cache_clear()


def _infer(ops: RankOps, stage: int, split: bool, calls: bool) -> Inferred:
    empty = Inferred(pl.DataFrame(schema=SPAN_SCHEMA), 0, 0, "none")
    doubt = ""
    tid = pipeline_thread(ops)
    if tid is None or not bool(ops.cpu_ops["p2p"].any()):
        # no point-to-point traffic: data-parallel or single-process training, not a pipeline
        return empty
    top = ops.cpu_ops
    seq = top.filter((pl.col("tid") == tid) | pl.col("backward")).sort("start")
    if seq.height == 0:
        return empty
    starts = seq["start"].to_numpy()
    ends = seq["end"].to_numpy()
    cls = np.full(seq.height, _COMPUTE, dtype=np.int8)
    cls[seq["backward"].to_numpy()] = _BACKWARD
    comm = seq["comm"].to_numpy()
    p2p = seq["p2p"].to_numpy()
    send = seq["send"].to_numpy()
    cls[comm] = _COMM
    cls[p2p & send] = _SEND
    cls[p2p & ~send] = _RECV
    cls[inside(starts, framework_spans(ops.spans))] = _EXCLUDED
    cls[seq["p2p_prep"].to_numpy()] = _EXCLUDED  # the transfer's, not an action's
    codes = _name_codes(seq["name"])
    glue_of = glue_classes(seq["name"])
    scaling = seq["name"].is_in(list(GRAD_SCALING_OPS)).to_numpy()
    batch_split = seq["name"].is_in(list(BATCH_SPLIT_OPS)).to_numpy()
    handoff = (seq["name"] == LOCAL_HANDOFF_OP).to_numpy()
    busy = ends - starts
    # what may run after a forward before its send and is not the forward's: in-place
    # bookkeeping (Megatron-core's token count), gradient scaling, a batch split, torch's glue
    # but an out-of-place sum (a residual add ends many a layer)
    not_tail = (seq["name"].str.ends_with("_").to_numpy() | scaling | batch_split
                | ((glue_of != NO_GLUE) & (glue_of != ACCUMULATE)))

    step_ids = _step_ids(starts, ops)
    blocks = _blocks(cls, step_ids)
    backward_blocks = [b for b in blocks if cls[b[0]] == _BACKWARD]
    if calls:
        glue = np.where(cls == _COMPUTE, glue_of, NO_GLUE)
        split_blocks = split_calls(backward_blocks, codes)
        # engine calls cut where a block is the concatenation of blocks seen alone (two Ws back
        # to back); where that leaves no forwards one or two to a backward action, the blocks
        # as they ran (a heavy stage's W of two layers, each layer's calls another stage's W)
        for calls_ in ([split_blocks, backward_blocks] if split_blocks != backward_blocks
                       else [backward_blocks]):
            backward = backward_actions(calls_, glue, codes, step_ids)
            ends_at = cls.copy()  # the glue an action took is the action's
            for a, b in backward:
                ends_at[a:b + 1][ends_at[a:b + 1] == _COMPUTE] = _BACKWARD
            blocks = _blocks(ends_at, step_ids)
            candidates = _candidates([b for b in blocks if ends_at[b[0]] == _COMPUTE],
                                     scaling | (glue_of != NO_GLUE), batch_split)
            forward_blocks = _cut_at_handoffs(candidates, handoff)
            n = len(backward)  # each forward has one backward action (B, or W alone) or two (I, W)
            allowed = range((n + 1) // 2, n + 1)
            forward, how = _forwards(forward_blocks, backward, codes, busy, allowed=allowed)
            if how in ("forward signature", "forward ops"):
                break
        else:
            return empty
        if how == "forward signature":
            doubt = _rival_forwards(forward, forward_blocks, backward, codes, busy, allowed,
                                    _sending(forward_blocks, ends_at))
        forward = _without_leading_collectives(forward, cls)
        forward = _loss_to_forward(forward, backward, ends_at)
        forward = _tails_to_forward(forward, backward, blocks, ends_at, not_tail, handoff)
    else:
        backward = _split_repeats(backward_blocks, codes) if split else backward_blocks
        # Every microbatch crosses the stage: its input or its output is a tensor of its own
        # sent or received, so there are no more backwards than sends or than recvs, whichever
        # is more (one side may be batched into one op). A block split into more is one
        # backward of a model whose layers repeat, not several backwards.
        if len(backward) > max(int((p2p & send).sum()), int((p2p & ~send).sum())):
            backward = backward_blocks
        seed = seq["name"].is_in(list(GRAD_SEED_OPS)).to_numpy()
        forward_blocks = _without_seeds([b for b in blocks if cls[b[0]] == _COMPUTE], backward,
                                        cls, seed)
        forward, how = _forwards(forward_blocks, backward, codes, busy,
                                 sending=_sending(forward_blocks, cls))
        forward = _without_leading_collectives(forward, cls)
        forward, backward = _seeds_to_backward(forward, backward, cls, seed)
        forward = _loss_to_forward(forward, backward, cls)
        forward = _relays_to_forward(forward, blocks, cls)
        forward = _tails_to_forward(forward, backward, blocks, cls, not_tail, handoff)
    forward = _losses_to_forward(forward, backward, blocks,
                                 seq["name"].str.contains(LOSS_OP_RE).fill_null(False).to_numpy())
    forward = _local_handoffs_to_forward(forward, cls, handoff)
    forward = _without_leading_scaling(forward, scaling)
    sums = glue_of == ACCUMULATE
    not_input = batch_split | scaling | ((glue_of != NO_GLUE) & ~sums)
    forward = _inputs_to_forward(forward, backward, cls, codes, not_input,
                                 seq["name"].is_in(list(INPUT_LOAD_OPS)).to_numpy(),
                                 seq["name"].is_in(list(LAYER_OPS)).to_numpy(), sums)

    rows = []
    for kind, found in (("F", forward), ("B", backward)):
        for mb, (i0, i1) in enumerate(sorted(found)):
            rows.append((stage, kind, mb, tid, int(starts[i0]), int(ends[i0:i1 + 1].max()),
                         "inferred", None, None))
    spans = pl.DataFrame(rows, schema=SPAN_SCHEMA, orient="row")
    compute_mask = (cls == _COMPUTE) | (cls == _BACKWARD)
    in_action = np.zeros(seq.height, dtype=bool)
    for i0, i1 in forward + backward:
        in_action[i0:i1 + 1] = True
    loose = compute_mask & ~in_action
    return Inferred(spans, int(busy[compute_mask].sum()), int(busy[compute_mask & in_action].sum()),
                    how, split=len(backward) > len(backward_blocks), doubt=doubt,
                    loose=(starts[loose].astype(np.int64), ends[loose].astype(np.int64),
                           scaling[loose], codes[loose]))


def _name_codes(names: pl.Series) -> np.ndarray:
    """Each op name's rank among the distinct names (sorted), as ``np.unique``'s inverse."""
    distinct = names.drop_nulls().unique().sort()  # a few dozen names among 10^4-10^5 ops
    return names.cast(pl.Enum(distinct)).to_physical().to_numpy().astype(np.int64)


def _step_ids(starts: np.ndarray, ops: RankOps) -> np.ndarray | None:
    """Which ``ProfilerStep#N`` span each op starts in (its index by start; None when the
    trace has no step marks): an action never crosses the start of a step."""
    marks = ops.spans.filter(pl.col("name").str.starts_with(STEP_SPAN_PREFIX))
    if marks.height == 0:
        return None
    return np.searchsorted(np.sort(marks["start"].to_numpy()), starts, side="right")


def _blocks(cls: np.ndarray, step_ids: np.ndarray | None = None) -> list[tuple[int, int]]:
    """Maximal runs of backward or of other compute ops: (first index, last index).

    Point-to-point ops, excluded ops and the start of a profiler step end a run; collectives
    do not (tensor-parallel all-reduces run inside a forward or a backward) and belong to the
    run around them."""
    at = np.flatnonzero(cls != _COMM)  # collectives neither end nor extend a run
    if at.size == 0:
        return []
    kinds = cls[at]
    change = kinds[1:] != kinds[:-1]
    if step_ids is not None:
        change |= step_ids[at][1:] != step_ids[at][:-1]
    first = np.flatnonzero(np.concatenate(([True], change)))
    last = np.concatenate((first[1:], [kinds.size])) - 1
    runs = (kinds[first] == _COMPUTE) | (kinds[first] == _BACKWARD)
    return list(zip(at[first[runs]].tolist(), at[last[runs]].tolist()))


def _modal(blocks: list[tuple[int, int]], codes: np.ndarray) -> tuple | None:
    """The commonest op sequence among the blocks' primitive roots (None if no block)."""
    if not blocks:
        return None
    counts = Counter(_primitive(tuple(codes[a:b + 1].tolist())) for a, b in blocks)
    return counts.most_common(1)[0][0]


@lru_cache(maxsize=4096)
def _primitive(seq: tuple) -> tuple:
    """The shortest ``u`` such that ``seq`` is ``u`` repeated (``seq`` itself if none)."""
    n = len(seq)
    if n < 2:
        return seq
    pi = [0] * n  # prefix function
    for i in range(1, n):
        k = pi[i - 1]
        while k and seq[i] != seq[k]:
            k = pi[k - 1]
        if seq[i] == seq[k]:
            k += 1
        pi[i] = k
    period = n - pi[-1]
    return seq[:period] if period < n and n % period == 0 else seq


def _tandem_unit(seq: tuple) -> tuple | None:
    """The unit of the longest stretch of ``seq`` that is one op sequence repeated (at least
    twice), e.g. three forwards with nothing between them inside a block that also holds
    other ops; None when nothing repeats."""
    n = len(seq)
    best: tuple[int, int, int] | None = None  # (covered ops, -period, start)
    for period in range(1, n // 2 + 1):
        run = 0
        for i in range(n - period):
            run = run + 1 if seq[i] == seq[i + period] else 0
            if run >= period:
                start = i - run + 1
                covered = (run + period) // period * period
                key = (covered, -period, -start)
                if best is None or key > best:
                    best = key
    if best is None:
        return None
    period, start = -best[1], -best[2]
    return seq[start:start + period]


def _split_repeats(blocks: list[tuple[int, int]], codes: np.ndarray) -> list[tuple[int, int]]:
    """A block that is the commonest unit's ops k times over is k blocks."""
    unit = _modal(blocks, codes)
    if unit is None:
        return blocks
    n = len(unit)
    out = []
    for a, b in blocks:
        length = b - a + 1
        if length > n and length % n == 0 and _primitive(tuple(codes[a:b + 1].tolist())) == unit:
            out.extend((a + j * n, a + (j + 1) * n - 1) for j in range(length // n))
        else:
            out.append((a, b))
    return out


def _grown(found: list[tuple[int, int]], unit: tuple, blocks: list[tuple[int, int]],
           codes: np.ndarray, busy: np.ndarray) -> list[tuple[int, int]]:
    """Each occurrence of ``unit`` grown over the ops of its block on either side that are
    ops of the unit too, up to the block's edge or the next occurrence: a chunk of more layers
    than another on the same rank runs the same ops more times, and all of them are its
    forward (its last layers alone match the smaller chunk's signature). A side is grown only
    where what it adds holds the unit's heaviest op (its layers' matmul): bookkeeping made of
    the unit's cheap ops (a batch's ``select``, ``clone`` and ``detach`` before the first
    forward of a step with no step mark) is no layer."""
    if not found:
        return found
    ops = set(unit)
    heavy = _heaviest(found, codes, busy)
    starts = np.array([a for a, _ in blocks])
    out = []
    for n, (i, j) in enumerate(found):
        a, b = blocks[int(np.searchsorted(starts, i, side="right")) - 1]
        lo = max(a, found[n - 1][1] + 1) if n and found[n - 1][1] >= a else a
        hi = min(b, found[n + 1][0] - 1) if n + 1 < len(found) and found[n + 1][0] <= b else b
        i0, j0 = i, j
        while i > lo and int(codes[i - 1]) in ops:
            i -= 1
        while j < hi and int(codes[j + 1]) in ops:
            j += 1
        if not (codes[i:i0] == heavy).any():
            i = i0
        if not (codes[j0 + 1:j + 1] == heavy).any():
            j = j0
        out.append((i, j))
    return out


def _heaviest(found: list[tuple[int, int]], codes: np.ndarray, busy: np.ndarray) -> int:
    """The op (code) that takes the most time in the occurrences ``found``, each op's time
    taken as its least over them (a host descheduled in a cheap op lends it milliseconds in
    one occurrence, never in all)."""
    names = np.unique(np.concatenate([codes[i:j + 1] for i, j in found]))
    times = np.stack([np.bincount(np.searchsorted(names, codes[i:j + 1]), weights=busy[i:j + 1],
                                  minlength=names.size) for i, j in found])
    return int(names[int(np.argmax(times.min(axis=0)))])


#: The largest blocks whose pairwise common op sequences are forward candidates.
COMMON_CORE_BLOCKS = 4


def _common_cores(blocks: list[tuple[int, int]], codes: np.ndarray) -> set[tuple]:
    """The longest op sequence each pair of ``blocks`` shares: a forward with other work
    before or after it in its block (the step's start-up work, the previous forward's
    bookkeeping, a receive buffer's allocation), where its neighbours hold the same forward
    with other work around it."""
    from difflib import SequenceMatcher
    from itertools import combinations

    out = set()
    seqs = [tuple(codes[a:b + 1].tolist()) for a, b in blocks if b - a < TANDEM_MAX_OPS]
    for x, y in combinations(seqs, 2):
        m = SequenceMatcher(None, x, y, autojunk=False).find_longest_match(0, len(x), 0, len(y))
        if m.size >= 2:
            out.add(x[m.a:m.a + m.size])
    return out


def _occurrences(unit: tuple, blocks: list[tuple[int, int]], codes: np.ndarray) -> list[tuple[int, int]]:
    """Non-overlapping occurrences of the op sequence ``unit`` inside the blocks, left to right."""
    n = len(unit)
    first = unit[0]
    out = []
    for a, b in blocks:
        i = a
        while i + n - 1 <= b:
            if codes[i] == first and tuple(codes[i:i + n].tolist()) == unit:
                out.append((i, i + n - 1))
                i += n
            else:
                i += 1
    return out


def _sending(blocks: list[tuple[int, int]], cls: np.ndarray) -> set[tuple[int, int]]:
    """The blocks whose next op, past a transfer's preparation, is a send."""
    return {blk for blk in blocks if _beside(cls, blk[1], 1) == _SEND}


def _covered(blocks: set[tuple[int, int]], found: list[tuple[int, int]]) -> int:
    """How many of ``blocks`` some action of ``found`` lies in."""
    return sum(any(a <= blk[1] and b >= blk[0] for a, b in found) for blk in blocks)


#: How the doubt of :func:`_rival_forwards` begins (only action spans settle it).
RIVAL_FORWARDS = "its forwards fit one op sequence"


def _rival_forwards(forward: list[tuple[int, int]], blocks: list[tuple[int, int]],
                    backward: list[tuple[int, int]], codes: np.ndarray, busy: np.ndarray,
                    allowed: range, sending: set[tuple[int, int]]) -> str:
    """Why the forwards of a split backward, read as one op sequence (``forward``), are a guess
    ("" where they are not): the family of like blocks that a split backward also allows holds
    more of the blocks a send follows. What a stage sends is an action's output, so that
    reading has it too; but a chunk of alike layers makes the sequence's count fit as well, and
    a split backward's counts do not tell the two apart (the plain reading does,
    :func:`_forwards`: one forward per backward)."""
    similar = _similar_blocks(blocks, backward, codes, _work_of(busy),
                              counts=set(allowed), ordered=_at_most_two_before)
    if similar is None or sorted(similar) == sorted(forward):
        return ""
    ours, theirs = _covered(sending, forward), _covered(sending, similar)
    if theirs <= ours:
        return ""
    return (f"{RIVAL_FORWARDS} ({len(forward)} of them, {ours} followed by a "
            f"send) and as well a family of like blocks ({len(similar)}, {theirs} followed by a "
            "send): a split backward's counts do not tell which")


def _work_of(busy: np.ndarray):
    """A block's work: the summed duration of its ops (``busy``, by op)."""
    done = np.concatenate(([0], np.cumsum(busy)))
    return lambda block: int(done[block[1] + 1] - done[block[0]])


def _forwards(blocks: list[tuple[int, int]], backward: list[tuple[int, int]], codes: np.ndarray,
              busy: np.ndarray, allowed: range | None = None,
              sending: set[tuple[int, int]] = frozenset()) -> tuple[list[tuple[int, int]], str]:
    """``wanted`` forwards among the non-backward blocks (see the module docstring).

    The candidates for the forward's op sequence are the primitive roots of the largest
    blocks and the units of their longest repeated stretches (a block of several forwards
    with nothing between them is one sequence repeated, with maybe other ops around it); the
    one that occurs exactly ``wanted`` times and does the most work is the forward. Failing
    that, the family of like blocks with one member per backward (:func:`_similar_blocks`).

    ``allowed``: the numbers of forwards a split backward allows (one or two backward actions
    per forward); then only an op sequence that occurs one of these many times is the forward
    (the most work, then the fewest occurrences: a forward of repeated layers, not its layer),
    or none.

    ``sending``: the blocks a send follows. What a stage sends is an action's output, so the
    family of like blocks is taken over the signature when it holds more of them (a chunk
    of two alike layers took the signature's count twice over, and another chunk's whole
    forwards were left out)."""
    wanted = len(backward) if allowed is None else max(allowed, default=0)
    if wanted == 0 or not blocks:
        return [], "none"

    work = _work_of(busy)
    largest = sorted(blocks, key=lambda b: (-work(b), b[0]))[:wanted]
    best: tuple[int, list[tuple[int, int]]] | None = None
    candidates = {_primitive(tuple(codes[a:b + 1].tolist())) for a, b in largest}
    candidates |= {tuple(codes[a:b + 1].tolist()) for a, b in largest}  # a forward of repeated layers
    candidates |= {u for u in (_tandem_unit(tuple(codes[a:b + 1].tolist())) for a, b in largest[:8]
                               if b - a < TANDEM_MAX_OPS) if u}
    candidates |= _common_cores(largest[:COMMON_CORE_BLOCKS], codes)
    b_starts = sorted(b[0] for b in backward)
    counts = {wanted} if allowed is None else set(allowed)
    ordered = _each_before if allowed is None else _at_most_two_before
    best_key: tuple[int, int] | None = None
    for unit in candidates:
        found = _grown(_occurrences(unit, blocks, codes), unit, blocks, codes, busy)
        if len(found) in counts and ordered(found, b_starts):
            total = sum(work(b) for b in found)
            key = (total, -len(found))
            if best_key is None or (key > best_key if allowed is not None else total > best_key[0]):
                best, best_key = (total, found), key
    if allowed is not None:
        if best is not None:
            return best[1], "forward signature"
        # chunks of different layers: no one op sequence, one family of like blocks a chunk
        similar = _similar_blocks(blocks, backward, codes, work, counts=counts, ordered=ordered)
        return (similar, "forward ops") if similar is not None else ([], "none")
    similar = _similar_blocks(blocks, backward, codes, work)
    if best is not None:
        # an op sequence that occurs as often as the backwards may be a chunk's last layer
        # only (a rank holding a chunk of three alike layers and one of one): whole blocks
        # of like ops that do far more of the work are the forwards then
        if similar is not None and (sum(work(b) for b in similar) > SIMILAR_WORK * best[0]
                                    or _covered(sending, similar) > _covered(sending, best[1])):
            return similar, "forward ops"
        return best[1], "forward signature"
    if similar is not None:
        return similar, "forward ops"
    unit = _modal(largest, codes)
    if unit is not None:
        found = _occurrences(unit, blocks, codes)
        if len(found) > wanted:
            return sorted(sorted(found, key=lambda b: (-work(b), b[0]))[:wanted]), "forward signature"
    return sorted(largest), "largest blocks"


#: Top-level in-place ops that scale gradients outside any action (torch's ``scale_grads``
#: divides each by the microbatches, after a chunk's last backward; Megatron-core and DeepSpeed
#: scale before the optimizer): gradient reduction, no action's compute.
GRAD_SCALING_OPS = ("aten::div_", "aten::mul_", "aten::_foreach_div_", "aten::_foreach_mul_")


#: The op ``torch.autograd.backward`` seeds a scalar loss's gradient with, at top level just
#: before the engine runs (torch's ``_make_grads``, Megatron-core's ``custom_backward``).
GRAD_SEED_OPS = ("aten::ones_like",)


def _seed_starts(backwards: list[tuple[int, int]], cls: np.ndarray,
                 seed: np.ndarray) -> dict[tuple[int, int], int]:
    """Each backward -> where its gradient seed starts: the seed ops right before it (its own
    start where there are none)."""
    starts = {}
    for a, b in backwards:
        k = a
        while k > 0 and cls[k - 1] == _COMPUTE and seed[k - 1]:
            k -= 1
        starts[(a, b)] = k
    return starts


def _without_seeds(blocks: list[tuple[int, int]], backwards: list[tuple[int, int]],
                   cls: np.ndarray, seed: np.ndarray) -> list[tuple[int, int]]:
    """The blocks without the gradient seeds that end them (:func:`_seeds_to_backward`): a
    seed is its backward's input, never a forward, even where a descheduled one outweighs the
    forwards (a block of only seeds is dropped)."""
    cut = {k: a for (a, _), k in _seed_starts(backwards, cls, seed).items() if k < a}
    out = []
    for a, b in blocks:
        end = next((k - 1 for k, at in cut.items() if a <= k <= b and at == b + 1), b)
        if end >= a:
            out.append((a, end))
    return out


def _seeds_to_backward(forwards: list[tuple[int, int]], backwards: list[tuple[int, int]],
                       cls: np.ndarray, seed: np.ndarray
                       ) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The gradient seed right before a backward is that backward's input (the last stage's
    output gradient, as a received gradient is another stage's): it moves out of the forward
    block it ends into the backward."""
    starts = _seed_starts(backwards, cls, seed)
    if all(k == a for (a, _), k in starts.items()):
        return forwards, backwards
    moved = {k: a for (a, _), k in starts.items() if k < a}
    out_f = []
    for a, b in forwards:
        cut = next((k for k in moved if a < k <= b + 1), None)
        out_f.append((a, cut - 1) if cut is not None else (a, b))
    return out_f, [(starts[(a, b)], b) for a, b in backwards]


def _loss_to_forward(forwards: list[tuple[int, int]], backwards: list[tuple[int, int]],
                     cls: np.ndarray) -> list[tuple[int, int]]:
    """A forward that runs straight into a backward (nothing but compute between: no transfer,
    no step mark) is the last stage's, and the compute between is its loss: the forward's."""
    if not forwards or not backwards:
        return forwards
    ends = np.array(sorted(b for _, b in forwards))
    grow: dict[int, int] = {}
    for a, _ in backwards:
        k = int(np.searchsorted(ends, a, side="left")) - 1
        if k < 0:
            continue
        f_end = int(ends[k])
        between = cls[f_end + 1:a]
        if between.size and bool(np.isin(between, (_COMPUTE, _COMM)).all()):
            grow[f_end] = a - 1
    if not grow:
        return forwards
    return [(a, grow.get(b, b)) for a, b in forwards]


#: The ops of a loss (torch's ``*_loss``, ``cross_entropy``, ``nll_loss``, ``kl_div``, ...).
LOSS_OP_RE = r"^aten::(\w*_loss\w*|\w*cross_entropy\w*|kl_div)$"


def _losses_to_forward(forwards: list[tuple[int, int]], backwards: list[tuple[int, int]],
                       blocks: list[tuple[int, int]], loss: np.ndarray) -> list[tuple[int, int]]:
    """A forward whose block goes on, after it, into a loss (before any other action of the
    block) keeps the ops up to the loss's last op: the last stage computes its loss after its
    forward, and with several forwards back to back (looped and interleaved schedules) the
    loss does not run straight into a backward."""
    if not forwards or not loss.any():
        return forwards
    starts = np.array([a for a, _ in blocks])
    taken = sorted([a for a, _ in forwards] + [a for a, _ in backwards])
    out = []
    for a, b in forwards:
        _, block_end = blocks[int(np.searchsorted(starts, a, side="right")) - 1]
        k = int(np.searchsorted(taken, b, side="right"))
        stop = min(block_end, taken[k] - 1) if k < len(taken) else block_end
        hits = np.flatnonzero(loss[b + 1:stop + 1])
        out.append((a, b + 1 + int(hits[-1])) if hits.size else (a, b))
    return out


#: The op a stage hands its output to the next stage on the same rank with (torch detaches
#: it: the turn of a V placement, where stage P - 1 feeds stage P without a transfer).
LOCAL_HANDOFF_OP = "aten::detach"


def _candidates(blocks: list[tuple[int, int]], no_forward: np.ndarray,
                batch_split: np.ndarray) -> list[tuple[int, int]]:
    """The blocks that may hold a forward: less a leading split of the batch (the step's
    start-up), none made only of ops that are no forward's (``no_forward``: the gradients'
    scaling, the runtime's glue around backward calls)."""
    out = []
    for a, b in blocks:
        while a <= b and batch_split[a]:
            a += 1
        if a <= b and not no_forward[a:b + 1].all():
            out.append((a, b))
    return out


def _without_leading_scaling(forwards: list[tuple[int, int]],
                             scaling: np.ndarray) -> list[tuple[int, int]]:
    """Forwards less the gradient scaling they open with: a block read whole as a forward
    (the family of like blocks) holds the scaling of the step before when nothing stands
    between them, and scaling is no action's compute."""
    out = []
    for a, b in forwards:
        while a < b and scaling[a]:
            a += 1
        out.append((a, b))
    return out


def _cut_at_handoffs(blocks: list[tuple[int, int]], handoff: np.ndarray) -> list[tuple[int, int]]:
    """Blocks cut after each run of detaches with no transfer after them: a V's rank hands
    one stage's output to its next stage on the same rank with a detach, so the two forwards
    run with nothing else between them."""
    out = []
    for a, b in blocks:
        start = a
        for j in range(a, b):
            if handoff[j] and not handoff[j + 1]:
                out.append((start, j))
                start = j + 1
        out.append((start, b))
    return out


def _local_handoffs_to_forward(forwards: list[tuple[int, int]], cls: np.ndarray,
                               handoff: np.ndarray) -> list[tuple[int, int]]:
    """A forward right followed by the detach of its output, with no transfer after it (a
    detach before a send is the transfer's), hands the output to a stage of the same rank:
    the detach is the forward's, as torch's runtime runs it."""
    out = []
    for a, b in forwards:
        j = b
        while j + 1 < cls.size and cls[j + 1] == _COMPUTE and handoff[j + 1]:
            j += 1
        out.append((a, j))
    return out


def _relays_to_forward(forwards: list[tuple[int, int]], blocks: list[tuple[int, int]],
                       cls: np.ndarray) -> list[tuple[int, int]]:
    """A block of compute between a recv and a send, holding one forward and nothing else
    read, starts that forward: the stage's input arrives, it computes, its output leaves. The
    forward found there starts at the block's start (a chunk whose first layers have ops the
    rank's other chunk lacks: the op sequence both share left those layers out as start-up).
    Its end is :func:`_tails_to_forward`'s."""
    if not forwards:
        return forwards
    starts = np.array([a for a, _ in blocks])
    inside: dict[int, list[int]] = defaultdict(list)
    for n, (i, j) in enumerate(forwards):
        k = int(np.searchsorted(starts, i, side="right")) - 1
        if k >= 0 and j <= blocks[k][1]:
            inside[k].append(n)
    out = list(forwards)
    for k, members in inside.items():
        a, b = blocks[k]
        if len(members) == 1 and _beside(cls, a, -1) == _RECV and _beside(cls, b, 1) == _SEND:
            out[members[0]] = (a, forwards[members[0]][1])
    return out


def _tails_to_forward(forwards: list[tuple[int, int]], backwards: list[tuple[int, int]],
                      blocks: list[tuple[int, int]], cls: np.ndarray, not_tail: np.ndarray,
                      handoff: np.ndarray) -> list[tuple[int, int]]:
    """A forward that is the last action of a block whose output leaves ends at the block's
    last op that is no bookkeeping (``not_tail``). The output leaves by a send after the
    block, or by a local ``handoff`` (a V's rank hands one stage's output to its next stage
    with a detach, :func:`_cut_at_handoffs`): what a stage hands on is its forward's output,
    so the ops after the op sequence read as its forward and before the hand-off (a chunk's
    last layer that the rank's other chunks lack, a residual add, a layer the op sequence
    both chunks share left out) compute that output. In-place bookkeeping after it
    (Megatron-core's token count) stays out."""
    if not forwards:
        return forwards
    blocks = _cut_at_handoffs(blocks, handoff)
    starts = np.array([a for a, _ in blocks])
    taken = np.array(sorted(a for a, _ in forwards + backwards))
    out = []
    for a, b in forwards:
        k = int(np.searchsorted(starts, a, side="right")) - 1
        end = b
        if k >= 0 and b < blocks[k][1] and (_beside(cls, blocks[k][1], 1) == _SEND
                                            or handoff[blocks[k][1]]):
            last = blocks[k][1]
            if int(np.searchsorted(taken, b, side="right")) == int(
                    np.searchsorted(taken, last, side="right")):  # no action after it there
                tail = np.flatnonzero((cls[b + 1:last + 1] == _COMPUTE) & ~not_tail[b + 1:last + 1])
                if tail.size:
                    end = b + 1 + int(tail[-1])
        out.append((a, end))
    return out


def _beside(cls: np.ndarray, i: int, step: int) -> int | None:
    """The class of the first op past ``i`` in direction ``step`` that is no transfer's
    preparation (None at the sequence's edge)."""
    j = i + step
    while 0 <= j < cls.size and cls[j] == _EXCLUDED:
        j += step
    return int(cls[j]) if 0 <= j < cls.size else None


#: The ops a step's batch is split into microbatches with: the step's start-up, never a
#: forward's input.
BATCH_SPLIT_OPS = (SPLIT_OP, "aten::split", "aten::chunk")

#: The ops that load a microbatch into the first stage: its move to the device and the
#: embedding lookup of its tokens. A run of only these is the input's delivery even where it
#: runs before a step's first forward only (one microbatch a step: the batch is the microbatch).
INPUT_LOAD_OPS = ("aten::to", "aten::_to_copy", "aten::copy_", "aten::embedding")
#: Ops that compute a layer (a projection, attention, a normalization, a convolution): a step's
#: start-up and wrap-up (zeroing, gradient norms, loss scaling, collation) run none of them.
LAYER_OPS = ("aten::linear", "aten::matmul", "aten::mm", "aten::addmm", "aten::bmm",
             "aten::baddbmm", "aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::convolution",
             "aten::layer_norm", "aten::rms_norm", "aten::group_norm", "aten::batch_norm",
             "aten::scaled_dot_product_attention")


def _inputs_to_forward(forwards: list[tuple[int, int]], backwards: list[tuple[int, int]],
                       cls: np.ndarray, codes: np.ndarray, not_input: np.ndarray,
                       load: np.ndarray | None = None, layer: np.ndarray | None = None,
                       sums: np.ndarray | None = None) -> list[tuple[int, int]]:
    """The input's delivery is the forward's: the same run of compute ops right before two
    forwards or more, but not before all of them (the first stage's load or embedding of each
    microbatch, which only the first chunk of an interleaved rank runs, so the forward's op
    sequence leaves it out), joins each forward it comes right before. A run before every
    forward is the schedule's own work around the forward call (Megatron-core's ``aten::zeros``):
    where the input's load runs before every forward, the forward's op sequence holds it. A run
    only ever before a forward that follows a backward (or none) may be the step's start-up,
    which runs before its first forward: it joins none, unless it is only the microbatch's load
    (``load``: :data:`INPUT_LOAD_OPS`) or computes a layer (``layer``: :data:`LAYER_OPS`, which
    no start-up runs): one microbatch a step on a rank of several chunks, whose first chunk
    loads the batch or runs first layers the other chunks lack before the step's first forward
    only. The run stops at any other action, transfer, batch split, gradient scaling or glue
    (``not_input``: an in-place ``add_`` between two forwards is the schedule's bookkeeping,
    Megatron-core's token count), and at an out-of-place sum (``sums``) with nothing of the run
    before it: inside a run it is a residual add ending a layer, at its start the gradient
    accumulation after a backward. Each run is judged alone, the most frequent first: each
    chunk may have its own (its first layers that the op sequence leaves out), and a longer run
    that ends in one already joined is judged by its ops before it (the first chunk's load
    before the first layer it shares with another chunk)."""
    if len(forwards) < 2:
        return forwards
    taken = np.zeros(cls.size, dtype=bool)
    for a, b in forwards + backwards:
        taken[a:b + 1] = True
    part = (cls == _COMPUTE) & ~taken & ~not_input
    inner = part & ~sums if sums is not None else part
    leads = []
    for a, _ in forwards:
        k = a
        while k > 0 and part[k - 1] and (inner[k - 1] or (k > 1 and inner[k - 2])):
            k -= 1
        leads.append(tuple(codes[k:a].tolist()))
    counts = Counter(lead for lead in leads if lead)
    ends = sorted([(b, "F") for _, b in forwards] + [(b, "B") for _, b in backwards])
    grow = [0] * len(forwards)
    # the most frequent run first: each chunk's forwards may have their own (the first chunk
    # its first layer, a later chunk its own first layers)
    for unit in sorted(counts, key=lambda lead: (-counts[lead], len(lead))):
        n = len(unit)
        grown = [grow[j] < n and lead[-n:] == unit for j, lead in enumerate(leads)]
        if _lead_joins(forwards, grown, n, grow, ends, load, layer):
            grow = [n if g else m for g, m in zip(grown, grow)]
    return [(a - n, b) for (a, b), n in zip(forwards, grow)]


def _lead_joins(forwards: list[tuple[int, int]], grown: list[bool], n: int, joined: list[int],
                ends: list[tuple], load: np.ndarray | None, layer: np.ndarray | None) -> bool:
    """Whether the run of ``n`` ops right before the ``grown`` forwards is their input's
    delivery (:func:`_inputs_to_forward`; ``ends``: every action's last op and kind, sorted).
    Where the last ``joined`` ops of a forward's run have joined it already (a shorter run,
    more frequent, that ends it: a chunk's own first layer), the ops before them are judged."""
    leading = [(a, a - m) for (a, _), g, m in zip(forwards, grown, joined) if g]
    only_load = load is not None and all(load[a - n:e].all() for a, e in leading)
    own = only_load or (layer is not None and all(layer[a - n:e].any() for a, e in leading))
    if not (1 if own else 2) <= len(leading) < len(forwards):
        return False
    after_forward = False
    for a, _ in leading:
        k = bisect_left(ends, (a - n, "")) - 1
        after_forward = after_forward or (k >= 0 and ends[k][1] == "F")
    return after_forward or own


def _without_leading_collectives(forwards: list[tuple[int, int]],
                                 cls: np.ndarray) -> list[tuple[int, int]]:
    """Forwards less what precedes a collective that the other forwards lack.

    Every forward of a stage runs the same collectives (a tensor-parallel all-reduce in each):
    one with k more than the fewest holds k collectives of other work before its own (the
    previous step's loss broadcast and its tail, with no step mark between), and starts after
    them."""
    if len(forwards) < 2:
        return forwards
    comm = np.flatnonzero(cls == _COMM)
    counts = [int(np.searchsorted(comm, b, side="right") - np.searchsorted(comm, a, side="left"))
              for a, b in forwards]
    fewest = min(counts)
    out = []
    for (a, b), n in zip(forwards, counts):
        if n > fewest:
            k = int(np.searchsorted(comm, a, side="left")) + (n - fewest) - 1
            a = int(comm[k]) + 1
            while a < b and cls[a] not in (_COMPUTE, _BACKWARD):
                a += 1
        out.append((a, b))
    return out


def _each_before(forwards: list[tuple[int, int]], b_starts: list[int]) -> bool:
    """Whether the i-th forward starts before the i-th backward: every schedule of the 1F1B and
    GPipe families and naive runs a microbatch's forward before its backward, so a family
    whose members come after the backwards (the optimizer's or the gradient norm's block, once
    per step) is not the forwards."""
    return all(f[0] < b for f, b in zip(sorted(forwards), b_starts))


def _at_most_two_before(forwards: list[tuple[int, int]], b_starts: list[int]) -> bool:
    """Whether at most 2k backward actions start before the k-th forward (from 0): each
    backward action of a split backward belongs to an earlier forward, one or two to each."""
    starts = np.asarray(b_starts)
    return all(int(np.searchsorted(starts, f[0])) <= 2 * k for k, f in enumerate(sorted(forwards)))


#: Blocks whose ops, as multisets, share at least this share (Jaccard) are the same work: one
#: forward may hold an op the others do not (the first microbatch's loss accumulator, a buffer
#: allocated once); a forward and the optimizer's or gradient norm's block share few.
SIMILAR_MIN = 0.6
#: The like-blocks reading replaces an exact op-sequence reading that covers less than
#: 1/SIMILAR_WORK of its work.
SIMILAR_WORK = 1.5


def _similar_blocks(blocks: list[tuple[int, int]], backward: list[tuple[int, int]],
                    codes: np.ndarray, work, counts: set[int] | None = None,
                    ordered=_each_before) -> list[tuple[int, int]] | None:
    """The forwards as the family of like blocks with one member per backward, or None
    (``counts``, ``ordered``: the numbers of forwards a split backward allows and the order
    they keep, :func:`_forwards`).

    Blocks are grouped by their multiset of ops (Jaccard >= :data:`SIMILAR_MIN` to a family's
    first, heaviest member). A forward family has exactly one block per backward, and the i-th
    forward starts before the i-th backward (every schedule of the 1F1B and GPipe families, and
    naive); the optimizer's block, once per step, is a family too, but it comes after its
    step's backwards. Of the families that qualify, the one doing the most work."""
    by_bag: dict[frozenset, list[tuple[int, int]]] = {}
    for blk in blocks:
        by_bag.setdefault(_bag(tuple(codes[blk[0]:blk[1] + 1].tolist())), []).append(blk)
    families: list[tuple[Counter, list[tuple[int, int]]]] = []
    for key, members in sorted(by_bag.items(), key=lambda kv: -sum(work(b) for b in kv[1])):
        bag = Counter(dict(key))
        for ref, fam in families:
            if _jaccard(bag, ref) >= SIMILAR_MIN:
                fam.extend(members)
                break
        else:
            families.append((bag, list(members)))
    b_starts = sorted(b[0] for b in backward)
    best: tuple[int, list[tuple[int, int]]] | None = None
    unions = (fam for wanted in sorted(counts or {len(backward)})
              for fam in _family_unions([f for _, f in families], wanted))
    for fam in unions:
        fam = sorted(fam)
        if not ordered(fam, b_starts):
            continue
        total = sum(work(b) for b in fam)
        if best is None or total > best[0]:
            best = (total, fam)
    return best[1] if best else None


#: Families of like blocks combined at most: a rank holding v chunks of different layers runs
#: one forward family per chunk (four: v up to 4, as far as the generated runs go).
MAX_UNION = 4


def _family_unions(families: list[list[tuple[int, int]]], wanted: int):
    """Each family of ``wanted`` blocks, then unions of two or three families of that many
    together (a rank holding chunks of different layers runs one forward family per chunk)."""
    from itertools import combinations

    fams = [f for f in families[:16] if len(f) <= wanted]
    for k in range(1, MAX_UNION + 1):
        for combo in combinations(fams, k):
            if sum(len(f) for f in combo) == wanted:
                yield [b for f in combo for b in f]


@lru_cache(maxsize=4096)
def _bag(seq: tuple) -> frozenset:
    """The multiset of an op sequence, as a hashable set of (op, count)."""
    return frozenset(Counter(seq).items())


def _jaccard(a: Counter, b: Counter) -> float:
    """Multiset Jaccard similarity of two op bags."""
    inter = sum((a & b).values())
    return inter / (sum(a.values()) + sum(b.values()) - inter)
