"""``advise``: which schedule, chunks and microbatch count to run instead, from a measured run.

Every candidate (schedule, chunks v, microbatches M) is predicted from the run by
:func:`pipeaudit.explain.whatif` (the catalogue order replayed with the run's measured
per-(stage, kind) durations, rescaled to the candidate's microbatch size and chunks, and its
measured cross-rank delays and host gaps) and by :mod:`pipeaudit.advise.memory` (static
memory plus activations per in-flight microbatch). The measured configuration is predicted
the same way, so the ranking compares like with like; its prediction against its measurement
is the model's calibration, reported. Candidates that fit the memory cap come first, each
group by predicted step time.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from math import comb

from pipeaudit import SCHEMA_VERSION
from pipeaudit.advise.memory import (
    SPLIT_HOLD, held_by_runtime, held_sends, net_of_messages, predicted_peaks,
    rank_memory, split_hold_ratio, weights_in_base,
)
from pipeaudit.errors import ConfigError, ScheduleError
from pipeaudit.explain.graph import pipeline_layout
from pipeaudit.advise.split_advice import proposals, split_model
from pipeaudit.advise.split_search import all_splits, one_layer_moves
from pipeaudit.explain.explain import prepared_graphs
from pipeaudit.explain.layer_costs import layer_model
from pipeaudit.explain.layers import even_layers, manifest_layers
from pipeaudit.explain.link import manifest_link, message_bytes, scaling_link
from pipeaudit.explain.whatif import Changes, whatif
from pipeaudit.harness.config import FRAMEWORK_SCHEDULES as HARNESS_FRAMEWORK_SCHEDULES
from pipeaudit.harness.config import MANIFEST_NAMES
from pipeaudit.schedules import SCHEDULE_NAMES, build_schedule, canonical_name
from pipeaudit.schedules.catalogue import CATALOGUE, HARNESS, config_problem

#: The schedules advised by default: those torch.distributed.pipelining runs, and GPipe.
DEFAULT_SCHEDULES = tuple(n for n in SCHEDULE_NAMES
                          if CATALOGUE[n].torch_class is not None)

#: What the other frameworks run, advised by default to their runs (by manifest
#: ``framework.name``): the harness's table of them.
FRAMEWORK_SCHEDULES = {MANIFEST_NAMES[f]: s for f, s in HARNESS_FRAMEWORK_SCHEDULES.items()}


@dataclass
class Candidate:
    """One configuration and its prediction."""

    schedule: str
    chunks: int
    microbatches: int
    predicted_step_time_us: float
    predicted_bubble: float
    predicted_peak_memory_bytes: int | None
    fits: bool | None  #: None: no memory prediction (no [memory] events) or no cap
    measured: bool = False  #: the configuration the run ran
    why: str = ""
    #: layers per stage in stage order (None: the run's layers per stage are not known)
    stage_layers: tuple[int, ...] | None = None

    @property
    def key(self) -> tuple:
        """(schedule, chunks, M, stage_layers): what tells two candidates apart."""
        return (self.schedule, self.chunks, self.microbatches, self.stage_layers)

    def to_dict(self) -> dict:
        return {"schedule": self.schedule, "chunks": self.chunks, "microbatches": self.microbatches,
                "stage_layers": None if self.stage_layers is None else list(self.stage_layers),
                "predicted_step_time_us": self.predicted_step_time_us,
                "predicted_bubble": self.predicted_bubble,
                "predicted_peak_memory_bytes": self.predicted_peak_memory_bytes,
                "fits": self.fits, "is_measured_configuration": self.measured, "why": self.why}


@dataclass
class Advice:
    """The measured configuration, the ranked candidates, and (after ``--verify``) reruns."""

    measured: dict
    candidates: list[Candidate]
    memory_cap_bytes: int | None
    memory_model: bool
    calibration: dict
    assumptions: list[str]
    inputs: list[str] = field(default_factory=list)
    verified: list[dict] = field(default_factory=list)
    #: after ``--verify``: the rerun measured fastest among those that fit (None: not verified)
    proven: dict | None = None
    notes: list[str] = field(default_factory=list)
    #: the global batch the candidates keep (None: not known, the measured run's)
    global_batch: int | None = None
    #: the measured run's layers per stage and where they came from (None: not known)
    stage_layers: tuple[int, ...] | None = None
    stage_layers_source: str | None = None

    @property
    def best(self) -> Candidate | None:
        return self.candidates[0] if self.candidates else None

    def to_dict(self) -> dict:
        return {"schema_version": SCHEMA_VERSION, "tool": "pipeaudit advise", "inputs": self.inputs,
                "measured": self.measured, "memory_cap_bytes": self.memory_cap_bytes,
                "memory_model": self.memory_model,
                "candidates": [c.to_dict() for c in self.candidates],
                "calibration": self.calibration, "verified": self.verified,
                "proven": self.proven,
                "measured_stage_layers": (None if self.stage_layers is None
                                          else list(self.stage_layers)),
                "stage_layers_source": self.stage_layers_source,
                "assumptions": self.assumptions, "notes": self.notes}


def microbatch_choices(P: int, measured_m: int, global_batch: int | None,
                       given: list[int] | None) -> list[int]:
    """The M to try: ``given``, else P/2 .. 4P and the measured M, kept to divisors of the
    global batch when it is known."""
    ms = set(given) if given else {max(1, P // 2), P, 2 * P, 3 * P, 4 * P, measured_m}
    if global_batch is not None:
        ms = {m for m in ms if m >= 1 and global_batch % m == 0}
    return sorted(m for m in ms if m >= 1)


def chunk_choices(name: str, measured: tuple[str, int]) -> list[int]:
    """The v to try for schedule ``name``: its fixed chunks, else 2 (and the measured v)."""
    d = CATALOGUE[name]
    if d.fixed_chunks is not None:
        return [d.fixed_chunks]
    out = {2}
    if measured[0] == name and measured[1] > 1:
        out.add(measured[1])
    return sorted(out)


def advise(run, *, memory_cap: int | None = None, schedules: list[str] | None = None,
           microbatches: list[int] | None = None, global_batch: int | None = None,
           stage_layers: list[int] | None = None, search_splits: bool = True,
           splits: list[tuple[int, ...]] | None = None) -> Advice:
    """Rank the candidate configurations of ``run`` (a :class:`pipeaudit.api.Run` of one
    pipeline with every rank present).

    ``stage_layers``: how the run was cut (layers per stage), for runs whose manifest does not
    say; with it known, every (schedule, v, M) is also tried at the split the search proposes
    (``search_splits``) and at each of ``splits`` that has its number of stages."""
    result = run.audit()
    tl = run.timeline
    tl, layers_source = _with_layers(tl, stage_layers, result.num_stages)
    if result.schedule is None:
        raise ConfigError("the run's schedule was not recognised: advise predicts from a run "
                          "whose schedule it knows (declare the one that ran: load(..., schedule=NAME))")
    P = result.num_ranks
    M0 = result.num_microbatches
    v0 = max(1, result.num_stages // P)
    ran = canonical_name(result.schedule)
    framework = ((tl.manifest or {}).get("framework") or {}).get("name", "torch")
    native = FRAMEWORK_SCHEDULES.get(framework)
    names = ([canonical_name(s) for s in schedules] if schedules
             else list(native or DEFAULT_SCHEDULES))
    if ran not in names:
        names.append(ran)
    if global_batch is None:
        global_batch = _global_batch(tl.manifest)
    ms = microbatch_choices(P, M0, global_batch, microbatches)
    if M0 not in ms:
        ms.append(M0)
    positions = {r: tl.layout.position(r)[1] for r in tl.layout.ranks if tl.layout.position(r)}
    memory = rank_memory(tl)
    if memory is not None:  # the readings net of what the run's own messages held
        memory = net_of_messages(memory, pipeline_layout(tl)[1], M0,
                                 message_bytes(tl.manifest, M0), held_by_runtime(ran))
    old_layers = manifest_layers(tl.manifest, result.num_stages)
    notes = []
    if memory is None:
        notes.append("no [memory] events in the traces (profile with profile_memory=True): "
                     "candidates are ranked on time only")
    candidates: list[Candidate] = []
    measured_pred = None
    layers = sum(old_layers) if old_layers else None
    # a run of torch's schedules is advised what torch runs; DeepSpeed's and Megatron's take
    # any M for 1F1B
    torch_run = framework == "torch"
    if native and not schedules:
        notes.append(f"a {framework} run: advised what {framework} runs ("
                     f"{', '.join(native)}); --schedules names others")
    if layers is not None:
        most = layers // P
        notes.append(f"the model has {layers} layers (manifest): at most {most} "
                     f"chunk{'' if most == 1 else 's'} per rank")
    weights_move = weights_in_base(result.device_type)
    sm = None
    if old_layers is not None and search_splits:
        _, cal, _ = prepared_graphs(tl)
        sm = split_model(old_layers, cal.compute, memory, layers_source)
        notes.append(f"layers per stage from {layers_source}: {','.join(map(str, old_layers))}; "
                     f"{sm.time.describe()}")
    for name in names:
        for v in chunk_choices(name, (ran, v0)):
            if layers is not None and P * v > layers:
                continue
            for m in sorted(set(ms)):
                if torch_run and config_problem(name, P, m, v, HARNESS):
                    continue  # torch's class refuses it (1F1B with M < P)
                try:
                    sched = build_schedule(name, P, m, v if v > 1 else None)
                except ScheduleError:
                    continue
                orders = {r: sched.orders[p] for r, p in positions.items()}
                message = message_bytes(tl.manifest, m)
                held = held_sends(name, message)

                def peaks_of(split):
                    if memory is None:
                        return None
                    if split is None:
                        shares = None
                    else:
                        sh = sm.memory_shares(split) if sm is not None else None
                        shares = sh if sh is not None else layer_model(
                            old_layers, [1.0] * len(old_layers)).shares(split)
                    return predicted_peaks(memory, orders, sched.placement, M0 / m, positions,
                                           shares, held, message or 0.0, weights_move)

                def candidate(split):
                    pred = whatif(tl, Changes(schedule=name, chunks=v, microbatches=m,
                                              stage_layers=split), result)
                    got = peaks_of(split)
                    peak = max(got.values()) if got else None
                    fits = None if peak is None or memory_cap is None else peak <= memory_cap
                    return pred, Candidate(name, sched.chunks, m, pred.predicted_step_time_us,
                                           pred.predicted_bubble, peak, fits, False,
                                           stage_layers=split)

                base_split = None
                if old_layers is not None:
                    base_split = tuple(old_layers if sched.num_stages == len(old_layers)
                                       else even_layers(layers, sched.num_stages))
                pred, cand = candidate(base_split)
                is_measured = (name, sched.chunks, m) == (ran, v0, M0)
                cand.measured = is_measured
                if is_measured:
                    measured_pred = (pred, cand)
                candidates.append(cand)
                tried = set()
                if sm is not None:
                    tried.update(proposals(sm, sched, M0 / m, memory, positions, memory_cap,
                                           peaks_of, weights_move))
                    tried.add(tuple(even_layers(layers, sched.num_stages)))
                tried.update(sp for sp in (splits or []) if len(sp) == sched.num_stages)
                tried.discard(base_split)
                searched = [candidate(sp)[1] for sp in sorted(tried)]
                given = [c for c in searched if splits and c.stage_layers in splits]
                searched.sort(key=fitting_first)
                if is_measured and sm is not None and searched:
                    searched = polished(searched, cand, lambda sp: candidate(sp)[1])
                keep = given + [c for c in searched[:1] if c not in given]
                candidates.extend(keep)
    if measured_pred is None:
        raise ConfigError(f"the measured configuration ({ran}, v={v0}, M={M0}) cannot be "
                          "replayed from the catalogue")
    pred0, base = measured_pred
    for c in candidates:
        c.why = _why(c, base)
    if old_layers is not None and search_splits:
        notes.append(split_note(candidates, base))
    # a tie keeps the measured configuration: no change is advised for no predicted gain
    candidates.sort(key=lambda c: (c.fits is False, c.predicted_step_time_us, not c.measured))
    model_error = base.predicted_step_time_us / result.step_time_us - 1.0
    close = close_to_best(candidates, abs(model_error))
    if close:
        notes.append(
            f"{len(close)} other candidate(s) predicted within "
            f"{order_band(abs(model_error)):.0%} of the advised one (twice the "
            "model's typical error: their order is not certain): " + ", ".join(
                f"{c.schedule} v={c.chunks} M={c.microbatches}" + (" (the run's)" if c.measured
                                                                   else "") for c in close)
            + ("; `--verify auto` settles their order by reruns" if tl.manifest is not None
               else ""))
    measured = {"schedule": ran, "chunks": v0, "microbatches": M0,
                "step_time_us": result.step_time_us, "bubble": result.bubble.measured,
                "peak_memory_bytes": max(m.peak for m in memory.values()) if memory else None,
                "predicted_step_time_us": base.predicted_step_time_us}
    link = manifest_link(tl.manifest)
    calibration = {"measured_step_time_us": result.step_time_us,
                   "predicted_step_time_us": base.predicted_step_time_us,
                   "error": model_error,
                   "what": "the measured configuration predicted by the same model",
                   "p2p_link": link.to_dict() if link else None}
    hold, hold_seen = split_hold_ratio(memory) if memory else (SPLIT_HOLD, False)
    hold_from = ("the run's own I pieces" if hold_seen else
                 "the default, measured 0.50 on MLP blocks; the run has no split backward")
    assumptions = [
        "each candidate replays the catalogue order for P ranks with the run's mean measured "
        "duration per (stage, kind), times M_measured/M (the same global batch; compute linear "
        "in the microbatch's rows); re-staged candidates take each stage's time from the layers it "
        "holds (the per-layer model below, from the run's layers per stage), else each rank's "
        "work split evenly over its chunks",
        _delays_assumed(tl.manifest),
        "memory: each rank's order replayed with a level read from the [memory] events: base "
        "(before the step), + the stage's forward rise per forward, - the stage's backward fall "
        "at the microbatch's last backward piece, + gradients at the stage's first backward; "
        "peaks at each forward's and backward's measured transient above the level (not "
        "multiplied by the microbatches in flight); activations and transients linear in the "
        "rows; a candidate whose torch runtime waits its sends only at the step's end (the "
        "multi-stage schedules' action runtime: outputs and input gradients; GPipe: input "
        "gradients) holds each message it sends to another rank to the step's end (an input "
        "gradient from the I or B that computes it), and what the run's runtime held is taken "
        "out of its readings; the V's turn (ZBV, DualPipeV) passes in place and its rank "
        "carries 2 x M messages from step to step; one message being rows x seq_len x hidden "
        "float32 values (harness manifest; neither modelled without it); "
        f"a split backward holds {hold:.2f} x the stage's activation from I to W (the "
        f"gradients of its weight operations' outputs, net of the sent input gradient; "
        f"{hold_from}), the first stage none; the last stage's kept part of each forward "
        "(output, loss) stays with the last stage when re-staged; "
        "re-staged candidates take each stage's terms from its layers (manifest), else "
        "1/v of the rank's per chunk" if memory else
        "memory: not predicted (no [memory] events)",
        "ranking: the candidates that fit the memory cap first, each group by predicted step "
        "time; the measured configuration is predicted by the same model (its error is the "
        "calibration)",
    ]
    if old_layers is not None:
        assumptions.append(
            "layer split: every contiguous split of the layers over the candidate's stages is "
            "searched (a dynamic programme minimising the most loaded stage's F + B compute, "
            "under the memory cap per rank), and the best few are replayed in full (at the "
            "measured schedule, v and M: every split where there are at most "
            f"{EXHAUSTIVE_SPLITS}, else one-layer moves from the best {POLISH_STARTS}); a stage "
            "costs its layers (each at its measured stage's value per layer) plus, on the "
            "first and last stage, the extras only they carry (embedding, data load, head, "
            "loss), told apart by the inner stages' value per layer (with two stages, by the "
            "lighter stage's); gradients follow the "
            "layers, and so do weights where the memory readings hold them (a GPU's, as large "
            "as their gradients; torch's CPU profiler counts from the start of profiling)")
    return Advice(measured, candidates, memory_cap, memory is not None, calibration, assumptions,
                  inputs=list(tl.inputs), notes=notes + list(pred0.notes),
                  global_batch=global_batch,
                  stage_layers=tuple(old_layers) if old_layers else None,
                  stage_layers_source=layers_source)


#: the most stages for which the measured configuration's best split is polished by replays
POLISH_STAGES = 16
#: at most this many rounds of one-layer moves from each start
POLISH_ROUNDS = 8
#: and at most this many replays for the moves of all starts together
POLISH_REPLAYS = 150
#: the searched splits the one-layer moves start from (best-predicted first)
POLISH_STARTS = 3
#: up to this many contiguous splits, the measured configuration replays every one of them
EXHAUSTIVE_SPLITS = 400


def polished(searched: list[Candidate], base: Candidate, replay) -> list[Candidate]:
    """At the measured schedule, v and M (with at most :data:`POLISH_STAGES` stages), ``searched``
    (ranked) improved by replays in full (``replay(split)`` -> Candidate). Where the layers have
    at most :data:`EXHAUSTIVE_SPLITS` contiguous splits, every one is replayed; otherwise each of
    the :data:`POLISH_STARTS` best moves one layer across one boundary at a time while that is
    predicted faster and fits (up to :data:`POLISH_ROUNDS` rounds, :data:`POLISH_REPLAYS`
    replays in all). The search ranks splits by a proxy (the most loaded stage or rank); the
    replay sees the schedule's order and the measured delays, whose best may lie beyond one
    start's reach."""
    first = searched[0].stage_layers
    if first is None or len(first) > POLISH_STAGES:
        return searched
    seen = {c.stage_layers for c in searched} | {base.stage_layers}
    layers, S = sum(first), len(first)
    if comb(layers - 1, S - 1) <= EXHAUSTIVE_SPLITS:
        rest = [replay(sp) for sp in all_splits(layers, S) if sp not in seen]
        return sorted(searched + rest, key=fitting_first)
    found = list(searched)
    budget = POLISH_REPLAYS
    for start in searched[:POLISH_STARTS]:
        best = start
        for _ in range(POLISH_ROUNDS):
            fresh = [sp for sp in one_layer_moves(best.stage_layers) if sp not in seen][:budget]
            seen.update(fresh)
            budget -= len(fresh)
            moved = [replay(sp) for sp in fresh]
            found.extend(moved)
            better = [c for c in moved if c.fits is not False
                      and c.predicted_step_time_us < best.predicted_step_time_us]
            if not better:
                break
            best = min(better, key=lambda c: c.predicted_step_time_us)
    return sorted(found, key=fitting_first)


def fitting_first(c: Candidate) -> tuple:
    """Sort key: the candidates that fit first, each group by predicted step time."""
    return (c.fits is False, c.predicted_step_time_us)


def _with_layers(tl, given: list[int] | None, num_stages: int) -> tuple:
    """``tl`` with the layers per stage the user gave (a copy whose manifest says them), and
    where the layers per stage come from (None: not known)."""
    if given is None:
        return tl, ("the manifest's stage_layers"
                    if manifest_layers(tl.manifest, num_stages) else None)
    given = [int(n) for n in given]
    if len(given) != num_stages or min(given) < 1:
        raise ConfigError(f"--stage-layers {','.join(map(str, given))}: the run has "
                          f"{num_stages} stages, each with at least one layer")
    manifest = {**(tl.manifest or {}), "stage_layers": given}
    return dataclasses.replace(tl, manifest=manifest), "--stage-layers"


def split_note(candidates: list[Candidate], base: Candidate) -> str:
    """Which split the search proposes at the measured schedule, v and M, against the run's."""
    same = [c for c in candidates if (c.schedule, c.chunks, c.microbatches)
            == (base.schedule, base.chunks, base.microbatches) and not c.measured]
    if not same:
        return ("layer split: no other split of the measured stages (one layer per stage, or "
                "none that fits the cap)")
    c = min(same, key=lambda c: c.predicted_step_time_us)
    gain = 1.0 - c.predicted_step_time_us / base.predicted_step_time_us
    return (f"layer split at the measured schedule, v and M: {_layers_text(c.stage_layers)} "
            f"predicted {c.predicted_step_time_us / 1000:.1f} ms against the run's "
            f"{_layers_text(base.stage_layers)} at {base.predicted_step_time_us / 1000:.1f} ms "
            f"({abs(gain):.1%} {'faster' if gain >= 0 else 'slower'})")


def _layers_text(split) -> str:
    return "-" if split is None else ",".join(map(str, split))


#: The model's typical step-time error: the median over the P = 4 accuracy benchmark's
#: candidates, both models, of the error one ``--verify`` sees (each candidate against its
#: prediction from the same session's rerun of the measured configuration; docs/advise.md).
TYPICAL_ERROR = 0.063


def order_band(model_error: float) -> float:
    """How far apart two predictions must be for their order to be trusted: twice the model's
    error (each may be off by it, in opposite directions), the error being
    :data:`TYPICAL_ERROR` or ``model_error`` (its error on the measured configuration) when
    larger."""
    return 2.0 * max(TYPICAL_ERROR, model_error)


def close_to_best(candidates: list[Candidate], model_error: float) -> list[Candidate]:
    """The fitting candidates after the first (``candidates`` ranked) predicted within
    :func:`order_band` of it: those not certainly slower."""
    fitting = [c for c in candidates if c.fits is not False]
    if not fitting:
        return []
    tol = order_band(model_error)
    best = fitting[0].predicted_step_time_us
    return [c for c in fitting[1:] if c.predicted_step_time_us <= best * (1.0 + tol)]


def _delays_assumed(manifest: dict | None) -> str:
    """What the candidates' cross-rank delays and host gaps assume."""
    link, what = scaling_link(manifest)
    if link is None:
        return f"cross-rank delays and host gaps per action as measured (not rescaled: {what})"
    return ("host gaps per action as measured; cross-rank delays as measured, each moved by "
            f"its message's change in size over the bandwidth of the link the run timed ({what})")


def _global_batch(manifest: dict | None) -> int | None:
    model = (manifest or {}).get("model") or {}
    b = model.get("batch_size")
    return b if isinstance(b, int) and b > 0 else None


def _why(c: Candidate, base: Candidate) -> str:
    """One sentence: why this candidate is faster or slower than the measured configuration."""
    if c.measured:
        return "the configuration the run ran"
    dt = c.predicted_step_time_us / base.predicted_step_time_us - 1.0
    db = c.predicted_bubble - base.predicted_bubble
    parts = [f"{'faster' if dt < 0 else 'slower'} by {abs(dt):.0%}"]
    if abs(db) >= 0.01:
        parts.append(f"bubble {base.predicted_bubble:.0%} -> {c.predicted_bubble:.0%}")
    if c.microbatches != base.microbatches:
        parts.append(f"M {base.microbatches} -> {c.microbatches}")
    if c.chunks != base.chunks:
        parts.append(f"v {base.chunks} -> {c.chunks}")
    if (c.stage_layers is not None and base.stage_layers is not None
            and len(c.stage_layers) == len(base.stage_layers)
            and c.stage_layers != base.stage_layers):
        parts.append(f"layers {_layers_text(base.stage_layers)} -> {_layers_text(c.stage_layers)}")
    if c.microbatches > base.microbatches or c.chunks > base.chunks:
        more = c.microbatches * c.chunks / (base.microbatches * base.chunks)
        parts.append(f"{more:g}x the actions per step (each pays the measured host gap and "
                     "transfers)")
    if c.fits is False:
        parts.append("does not fit the memory cap")
    elif (c.predicted_peak_memory_bytes is not None and base.predicted_peak_memory_bytes
          and c.predicted_peak_memory_bytes > base.predicted_peak_memory_bytes * 1.05):
        parts.append("holds more activations")
    return "; ".join(parts)
