"""Peak memory of a candidate schedule, from the measured run's ``[memory]`` events.

The model replays one rank's order with a memory level, every term read from the measured
run's memory timeline (the level at an action's start is ``Total Allocated`` at the last
sample before it; an action's *delta* is the level at the next action's start minus the level
at its own start; its *excess* is the most the level rises above its start until then):

- the level starts at ``base``, what the rank holds before its first action of a step
  (weights, optimizer state), the median over steps;
- a forward of stage ``s`` raises the level by ``activation[s]`` (its median forward delta: what
  one microbatch in flight holds) and peaks at ``forward_peak[s]`` above its start during it;
- the microbatch's last backward piece on that stage (B, or W when the backward is split)
  changes the level by ``release[s]`` (the median delta of the stage's backwards but its first
  in a step: the activations freed, less what the step keeps, such as the last stage's loss);
- the stage's first backward of a step leaves ``grads[s]`` more (the gradients, held to the
  step's end);
- a full backward (B) peaks at ``backward_peak`` above its start: its transient working set
  (input gradients, weight-gradient temporaries) that exists while one microbatch's backward
  runs and does not multiply by the microbatches in flight (why a peak solved as
  ``in-flight x unit`` over-predicts GPipe);
- a split backward (I then W, the zero-bubble schedules) holds, from a microbatch's I to its W
  on a stage, the gradients of the outputs of that stage's weight operations (torch's
  ``stage_backward_input`` keeps them for ``stage_backward_weight``): ``split_hold`` times the
  stage's activation, the ratio read from the run's own I pieces when it split its backwards
  (median over stages), else :data:`SPLIT_HOLD`. The I peaks :data:`SPLIT_TRANSIENT` of
  ``backward_peak`` above the level it leaves; the W frees without rising. The pipeline's first
  stage has no input gradient: its I does nothing and its W is the whole backward (its
  transient, no hold);
- sends a candidate's runtime waits for only at the step's end (:func:`held_by_runtime`, read
  from torch's ``schedules.py``) stay allocated to the step's end, a sent output from the
  microbatch's last backward piece on the stage, a sent input gradient from the piece that
  computes it (B, or the I): one message (``rows x seq_len x hidden`` float32 values, from a
  harness manifest) each, to another rank only;
- a stage whose next stage is on the same rank (the V's turn: stages P-1 and P of ZBV and
  DualPipeV) passes its output and takes back the input gradient in place (torch's
  ``set_local_fwd_input``/``set_local_bwd_input``): the receiving stage's buffers keep the
  tensors of every microbatch until the next step's replace them, so the rank carries one
  message per microbatch each way from step to step (``2 x M x message`` above base at the
  step's start); the turning stage's forward frees the previous step's output when it sets its
  own, and its output outlives the microbatch's backward.

What the measured run's own held sends and turn left in its readings is taken out first
(:func:`net_of_messages`), so that every candidate adds its own.

The last stage keeps part of each microbatch's forward to the step's end (its output, the
loss): that part, its activation plus its release, stays with whichever stage is last when a
candidate re-stages the layers, instead of following them.

The peak is the largest level + excess along the order. For a candidate with ``rows_ratio`` =
M_measured / M_candidate (the same global batch), the activation, release and both transients
scale with the rows of a microbatch; base and gradients do not. Re-staged candidates take each
new stage's terms from the layers it holds (:mod:`pipeaudit.explain.layers`: activations
follow the layers, so a heavy layer's activations land on the rank that holds it), else each
rank's measured terms split evenly over its chunks; a backward's transient stays the rank's
(one layer's backward runs at a time, whatever the chunks).

Without ``[memory]`` events (``profile_memory=False``) there is no prediction: the advice
ranks on time only and says so.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from statistics import median

import numpy as np
import polars as pl

from pipeaudit.explain.layers import Shares, restage
from pipeaudit.timeline.model import Timeline

BACKWARD = ("B", "I", "W")

#: What a split backward holds from I to W, as a share of the stage's activation, when the run
#: did not split its backwards: the gradients of the outputs of the stage's weight operations,
#: net of the input gradient the I sends. Measured 0.50 on every stage of the harness's MLP
#: blocks at P = 4 but the turn's and the last (0.55-0.59; torch 2.11, ZBV, M = 8 and 16,
#: balanced and a 3x heavier stage) and 0.50-0.58 at P = 2 (torch 2.13). A transformer layer's
#: weight operations output 11h values per token (qkv 3h, projection h, MLP 4h and h, two
#: norms h each) of the about 17h per token its backward saves (Korthikanti et al. 2022,
#: without attention scores): 0.65.
SPLIT_HOLD = 0.5

#: An I's transient (its peak above the level it leaves, hold included) as a share of a full
#: backward's; its W frees and rises no further. The first stage's I computes nothing and its
#: W runs the whole backward, with a full backward's transient. Measured 0.40-0.50 (harness
#: MLP blocks, torch 2.13, ZBV, P = 2, M = 4; stage 0's W: 1.00).
SPLIT_TRANSIENT = 0.45


def _release_pieces(order: Sequence) -> dict[tuple[int, int], str]:
    """(stage, microbatch) -> the kind of its last backward piece in ``order`` (B, or W)."""
    release: dict[tuple[int, int], str] = {}
    for a in order:
        if a.kind in BACKWARD:
            release[(a.stage, a.microbatch)] = a.kind
    return release


@dataclass(frozen=True)
class StageMemory:
    """The memory terms of one stage (bytes, at the measured microbatch size)."""

    activation: float  #: level rise of a forward (held until the microbatch's backward)
    forward_peak: float  #: most the level rises above a forward's start during it
    release: float  #: level change of a backward but the stage's first (<= 0: freed)
    grads: float  #: what the stage's first backward of a step leaves more (gradients)


@dataclass(frozen=True)
class RankMemory:
    """What one rank's memory is made of (bytes)."""

    rank: int
    base: int  #: held before the first action of a step
    peak: int  #: the measured peak
    #: a full backward's transient: most the level rises above a B's start during it (from a
    #: split run: the first stage's W, and the other stages' I over SPLIT_TRANSIENT)
    backward_peak: float
    stages: dict[int, StageMemory]  #: the rank's measured stages
    #: stage -> its I pieces' level rise over its activation (a run with split backwards)
    split_hold: dict[int, float] = field(default_factory=dict)

    @property
    def grads(self) -> int:
        """The gradients held after the step's backwards (all the rank's stages)."""
        return int(sum(s.grads for s in self.stages.values()))


@dataclass(frozen=True)
class HeldSends:
    """Sent tensors a schedule's runtime keeps until the step's end (bytes of one message at
    the candidate's microbatch size)."""

    message: float  #: one activation (or its gradient) between two stages
    outputs: bool  #: a forward's sent output outlives the microbatch's backward
    gradients: bool  #: a backward's sent input gradient stays


#: Which sends torch's runtimes wait for only at the end of the step (torch 2.11-2.13,
#: ``schedules.py``): the action runtime of the multi-stage schedules waits every send at the
#: step's end; ScheduleGPipe waits its backward sends after the last backward (its forward
#: sends after the last forward, while autograd holds those outputs anyway); Schedule1F1B
#: waits each send at the next action.
def held_by_runtime(name: str) -> tuple[bool, bool]:
    """(forward outputs, backward gradients) held to the step's end by ``name``'s torch runtime."""
    from pipeaudit.schedules.catalogue import ACTION_RUNTIME, torch_runtime

    if torch_runtime(name) == ACTION_RUNTIME:
        return True, True
    return False, name == "gpipe"


def held_sends(candidate: str, message: float | None) -> HeldSends | None:
    """What ``candidate``'s runtime (a canonical schedule name) holds to the step's end, one
    message being ``message`` bytes; None when nothing (or the size is unknown)."""
    outputs, gradients = held_by_runtime(candidate)
    if not message or not (outputs or gradients):
        return None
    return HeldSends(message, outputs, gradients)


def turning_stages(placement: Sequence[int]) -> set[int]:
    """The stages whose next stage is on the same rank (``placement``: stage -> rank)."""
    return {s for s in range(len(placement) - 1) if placement[s + 1] == placement[s]}


def _sends(placement: Sequence[int], s: int) -> tuple[bool, bool]:
    """(its output, its input gradient): what stage ``s`` sends to another rank."""
    return (s != len(placement) - 1 and placement[s + 1] != placement[s],
            s != 0 and placement[s - 1] != placement[s])


def net_of_messages(memory: Mapping[int, RankMemory], placement: Sequence[int],
                    microbatches: int, message: float | None,
                    held: tuple[bool, bool]) -> dict[int, RankMemory]:
    """``memory`` read from a run of ``placement``, with what its messages held taken out, so
    that each candidate adds its own: at a turn (stages passing in place), the carried
    messages from base, the freed previous output from the turning stage's activation and its
    kept output from its release; the sends its runtime kept to the step's end (``held``:
    outputs, input gradients; :func:`held_by_runtime`) from the releases, and a sent gradient
    from the split hold of the I that sent it. Unchanged without the message size."""
    if not message:
        return dict(memory)
    held_out, held_grad = held
    turns = turning_stages(placement)
    out = {}
    for r, m in memory.items():
        turning = [s for s in m.stages if s in turns]
        stages, hold = {}, dict(m.split_hold)
        for s, t in m.stages.items():
            act, rel = t.activation, t.release
            if s in turning:
                act, rel = act + message, rel - message
            sends_out, sends_grad = _sends(placement, s)
            rel -= message * ((held_out and sends_out) + (held_grad and sends_grad))
            if held_grad and sends_grad and s in hold and act > 0:
                hold[s] -= message / act
            stages[s] = StageMemory(act, t.forward_peak, rel, t.grads)
        out[r] = RankMemory(m.rank, int(m.base - 2 * message * microbatches * len(turning)),
                            m.peak, m.backward_peak, stages, hold)
    return out


def order_peak(order: Sequence, base: float, backward_peak: float,
               stages: Mapping[int, StageMemory], held: HeldSends | None = None,
               split_hold: float = SPLIT_HOLD, placement: Sequence[int] | None = None,
               in_place: float = 0.0) -> float:
    """The largest level + excess along one rank's ``order`` (the module's model); ``held``:
    sends kept to the step's end, to another rank only: a stage's output from the microbatch's
    last backward piece on it, its input gradient from the piece that computes it (B, or the
    I); ``placement``: stage -> rank position, None: every stage on its own rank);
    ``split_hold``: what an I holds until its W, as a share of the stage's activation;
    ``in_place``: one message's bytes where a stage's next stage is on the same rank (the V's
    turn; 0: not modelled)."""
    release = _release_pieces(order)
    last_stage = max(stages)
    place = list(placement) if placement is not None else list(range(last_stage + 1))
    sends = {s: _sends(place, s) for s in stages}  # (output, input gradient) to another rank
    turns = {a.stage for a in order} & turning_stages(place)
    carried = 2 * in_place * len({a.microbatch for a in order}) * len(turns)
    level = peak = float(base) + carried
    seen: set[int] = set()
    for a in order:
        s = stages[a.stage]
        if a.kind == "F":
            peak = max(peak, level + max(s.forward_peak, s.activation))
            level += s.activation - (in_place if a.stage in turns else 0.0)
            continue
        hold = split_hold * s.activation if a.stage != 0 else 0.0
        # a sent input gradient the runtime keeps: from the I that computes it, else the B
        grad_kept = (held.message if held is not None and held.gradients and sends[a.stage][1]
                     else 0.0)
        if a.kind == "I":
            level += hold + grad_kept
            peak = max(peak, level + (SPLIT_TRANSIENT * backward_peak if a.stage != 0 else 0.0))
        elif a.kind == "B" or a.stage == 0:
            peak = max(peak, level + backward_peak)
        if a.kind != release.get((a.stage, a.microbatch)):
            continue
        level += s.release - (hold if a.kind == "W" else 0.0)
        if a.stage in turns:
            level += in_place  # the output stays in the next stage's buffer
        if held is not None:
            level += held.message * (held.outputs and sends[a.stage][0])
            level += grad_kept if a.kind == "B" else 0.0
        if a.stage not in seen:
            seen.add(a.stage)
            level += s.grads
        peak = max(peak, level)
    return peak


def _level_at(ts: np.ndarray, alloc: np.ndarray, t: int) -> int | None:
    i = int(ts.searchsorted(t, side="right")) - 1
    return int(alloc[i]) if i >= 0 else None


def _max_in(ts: np.ndarray, alloc: np.ndarray, t0: int, t1: int, start_level: int) -> int:
    lo, hi = int(ts.searchsorted(t0, side="left")), int(ts.searchsorted(t1, side="right"))
    return max(start_level, int(alloc[lo:hi].max())) if hi > lo else start_level


@dataclass
class _Samples:
    """Per-step observations of one rank's memory timeline."""

    before: list[int]
    fwd: dict[int, list[int]]
    fwd_peak: dict[int, list[int]]
    bwd: dict[int, list[int]]
    first_bwd: dict[int, list[int]]
    bwd_peak: list[int]
    inp: dict[int, list[int]]  #: level change of each I piece (split backwards)


def _observe(rt, ts: np.ndarray, alloc: np.ndarray) -> _Samples:
    """Deltas and excesses of every action of one rank (``ts``/``alloc``: its memory series)."""
    obs = _Samples([], defaultdict(list), defaultdict(list), defaultdict(list),
                   defaultdict(list), [], defaultdict(list))
    acts = rt.actions.sort("start")
    for _, step in acts.group_by("step", maintain_order=True):
        rows = list(step.iter_rows(named=True))
        start0 = _level_at(ts, alloc, rows[0]["start"])
        if start0 is None:
            continue
        obs.before.append(start0)
        first: dict[int, bool] = {}
        # a stage's backward pieces of one microbatch are summed, at its last piece
        pending: dict[tuple[int, int], int] = defaultdict(int)
        last_piece = _release_pieces([_Act(r) for r in rows])
        for n, a in enumerate(rows):
            t1 = rows[n + 1]["start"] if n + 1 < len(rows) else a["end"]
            lv0, lv1 = _level_at(ts, alloc, a["start"]), _level_at(ts, alloc, t1)
            if lv0 is None or lv1 is None:
                continue
            top = _max_in(ts, alloc, a["start"], t1, lv0)
            excess = top - lv0
            s, key = a["stage"], (a["stage"], a["microbatch"])
            if a["kind"] == "F":
                obs.fwd[s].append(lv1 - lv0)
                obs.fwd_peak[s].append(excess)
                continue
            # as a full backward's transient: a B's, the first stage's W (its whole backward),
            # another stage's I above the level it leaves over SPLIT_TRANSIENT
            if a["kind"] == "B" or (a["kind"] == "W" and s == 0):
                obs.bwd_peak.append(excess)
            elif a["kind"] == "I" and s != 0:
                obs.bwd_peak.append((top - max(lv0, lv1)) / SPLIT_TRANSIENT)
            if a["kind"] == "I":
                obs.inp[s].append(lv1 - lv0)
            pending[key] += lv1 - lv0
            if a["kind"] == last_piece.get(key):
                (obs.bwd if first.get(s) else obs.first_bwd)[s].append(pending.pop(key))
                first[s] = True
    return obs


@dataclass(frozen=True)
class _Act:
    """An action row seen as the (stage, microbatch, kind) that the order helpers read."""

    row: dict

    @property
    def stage(self) -> int:
        return self.row["stage"]

    @property
    def microbatch(self) -> int:
        return self.row["microbatch"]

    @property
    def kind(self) -> str:
        return self.row["kind"]


def _stage_terms(obs: _Samples) -> dict[int, StageMemory] | None:
    out = {}
    for s, fwd in obs.fwd.items():
        if not obs.first_bwd.get(s):
            return None
        activation = float(median(fwd))
        release = float(median(obs.bwd[s])) if obs.bwd.get(s) else -activation
        grads = max(0.0, float(median(obs.first_bwd[s])) - release)
        out[s] = StageMemory(activation, float(median(obs.fwd_peak[s])), release, grads)
    return out or None


def rank_memory(tl: Timeline) -> dict[int, RankMemory] | None:
    """Each rank's memory terms and measured peak; None without ``[memory]`` events."""
    out = {}
    for rt in tl.ranks:
        mem = rt.memory
        if mem.height == 0 or rt.actions.height == 0:
            return None
        dev = mem.group_by("device_id").agg(pl.col("total_allocated").max()).sort(
            "total_allocated", descending=True)["device_id"][0]
        mem = mem.filter(pl.col("device_id") == dev).sort("ts")
        ts, alloc = mem["ts"].to_numpy(), mem["total_allocated"].to_numpy()
        obs = _observe(rt, ts, alloc)
        stages = _stage_terms(obs)
        if not obs.before or stages is None:
            return None
        hold = {s: float(median(v)) / stages[s].activation for s, v in obs.inp.items()
                if s != 0 and s in stages and stages[s].activation > 0}
        out[rt.rank] = RankMemory(rt.rank, int(median(obs.before)), int(alloc.max()),
                                  float(median(obs.bwd_peak)) if obs.bwd_peak else 0.0, stages,
                                  hold)
    return out


def split_hold_ratio(memory: Mapping[int, RankMemory]) -> tuple[float, bool]:
    """What a split backward holds from I to W over the stage's activation: the median of the
    run's own I pieces over its stages (True: measured), else :data:`SPLIT_HOLD` (False)."""
    seen = [v for m in memory.values() for v in m.split_hold.values()]
    return (float(median(seen)), True) if seen else (SPLIT_HOLD, False)


def _scaled(s: StageMemory, rows_ratio: float) -> StageMemory:
    return StageMemory(s.activation * rows_ratio, s.forward_peak * rows_ratio,
                       s.release * rows_ratio, s.grads)


def _restaged(memory: Mapping[int, RankMemory], placement: Sequence[int],
              position: Mapping[int, int], shares: Shares | None) -> dict[int, StageMemory]:
    """Each new stage's terms: from the layers it holds (``shares``), else its rank's measured
    terms split evenly over the rank's new stages (``position``: rank id -> pipeline index).
    What the last stage keeps of each microbatch (its activation plus its release) goes to the
    new last stage."""
    old = {s: t for m in memory.values() for s, t in m.stages.items()}
    last = max(old)
    kept = max(0.0, old[last].activation + old[last].release)
    old[last] = replace(old[last], release=old[last].release - kept)
    terms = [f.name for f in fields(StageMemory)]
    if shares is not None and set(old) == set(range(len(old))):
        per_term = {f: restage({s: getattr(t, f) for s, t in old.items()}, shares) for f in terms}
        out = {s: StageMemory(*(per_term[f][s] for f in terms)) for s in shares}
    else:
        out = {}
        for r, m in memory.items():
            new = [s for s, p in enumerate(placement) if p == position.get(r)]
            for s in new:
                out[s] = StageMemory(*(sum(getattr(old[o], f) for o in m.stages) / len(new)
                                       for f in terms))
    new_last = max(out)
    out[new_last] = replace(out[new_last], release=out[new_last].release + kept)
    return out


def weights_in_base(device_type: str | None) -> bool:
    """Whether a rank's base holds its weights: a GPU's allocator counts what was allocated
    before the profiler started; torch's CPU profiler counts from the start of profiling, so
    its levels hold no weights (a CPU base is what the previous step left: DeepSpeed's last
    or middle rank sometimes keeps its gradients there, sometimes not, run to run)."""
    return device_type == "cuda"


def _identity(shares: Shares) -> bool:
    """Whether ``shares`` keeps every stage as it was."""
    return all(set(share) == {s} and abs(share[s] - 1.0) < 1e-9 for s, share in shares.items())


def predicted_peaks(memory: Mapping[int, RankMemory], orders: Mapping[int, Sequence],
                    placement: Sequence[int], rows_ratio: float,
                    position: Mapping[int, int] | None = None,
                    shares: Shares | None = None,
                    held: HeldSends | None = None,
                    in_place: float = 0.0, weights_move: bool = False) -> dict[int, int]:
    """Each rank's predicted peak for a candidate: its per-rank ``orders`` (rank id -> order),
    the candidate's stage ``placement``, ``rows_ratio`` = M_measured / M; ``shares`` re-stages
    per layer (None: the measured stages when the placement keeps them, else an even split of
    each rank's terms over its chunks); ``position``: rank id -> pipeline index (default: the
    rank id); ``held``: sends the candidate's runtime keeps to the step's end;
    ``weights_move``: the ranks' bases hold their weights (:func:`weights_in_base`), which follow
    the layers when re-staged."""
    position = dict(position) if position is not None else {r: r for r in memory}
    old_stages = sorted(s for m in memory.values() for s in m.stages)
    same = old_stages == list(range(len(placement))) and all(
        s in memory[r].stages for r in memory for s, p in enumerate(placement)
        if p == position.get(r))
    moved = not same or (shares is not None and not _identity(shares))
    stages = (_restaged(memory, placement, position, shares) if moved
              else {s: t for m in memory.values() for s, t in m.stages.items()})
    # a rank's weights follow its layers in a new split of the same stages: as large as its
    # gradients (one fp32 gradient per parameter), where its base holds them; the rest of its
    # base (data, buffers) stays. Re-placed stages (another v, the V) keep each rank's base: a
    # stage's gradient term there can hold more than gradients (the V's turn buffers)
    base = {r: max(0.0, m.base + (sum(t.grads for s, t in stages.items()
                                      if placement[s] == position.get(r)) - m.grads
                                  if moved and same and weights_move else 0))
            for r, m in memory.items()}
    stages = {s: _scaled(t, rows_ratio) for s, t in stages.items()}
    hold = split_hold_ratio(memory)[0]
    return {r: int(order_peak(orders[r], base[r], m.backward_peak * rows_ratio, stages, held,
                              hold, placement, in_place))
            for r, m in memory.items() if r in orders}

