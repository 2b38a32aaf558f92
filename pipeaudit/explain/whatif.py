"""``whatif``: replay a measured run with changes and predict its step time and bubble.

Changes that keep the order (``scale``, ``comm_latency_us``) replay every measured step as it
ran (:func:`pipeaudit.explain.model.measured_model`): with no change the prediction is the
measurement. Changes of the order (``microbatches``, ``schedule``, ``chunks``) replay the
catalogue order with typical values (:func:`pipeaudit.explain.model.typical_model`); the same
typical model replayed on the *observed* order gives the calibration error of the prediction,
reported with it. The assumptions behind every number are listed in ``Prediction.assumptions``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from statistics import median
from typing import TYPE_CHECKING

from pipeaudit import SCHEMA_VERSION
from pipeaudit.actions import KINDS
from pipeaudit.errors import ConfigError
from pipeaudit.explain.calibrate import Calibration
from pipeaudit.explain.explain import prepared_graphs
from pipeaudit.explain.graph import StepGraph
from pipeaudit.explain.layer_costs import layer_model
from pipeaudit.explain.layers import Shares, candidate_layers, manifest_layers, restage
from pipeaudit.explain.link import activation_bytes, scaling_link
from pipeaudit.explain.model import measured_model, run_model, typical_model
from pipeaudit.schedules import build_schedule, canonical_name, default_chunks
from pipeaudit.schedules.catalogue import torch_runtime
from pipeaudit.timeline.model import Timeline

if TYPE_CHECKING:
    from pipeaudit.audit.result import AuditResult

US = 1000.0


@dataclass(frozen=True)
class Changes:
    """What to change. ``scale`` holds ``(stage, kind or None, factor)``: that stage's actions
    (of that kind, or all kinds) take ``factor`` times as long."""

    scale: tuple[tuple[int, str | None, float], ...] = ()
    comm_latency_us: float | None = None
    microbatches: int | None = None
    schedule: str | None = None
    chunks: int | None = None
    #: layers per stage of the candidate, in stage order (None: as even as possible, or the
    #: run's own split when the stages stay the same)
    stage_layers: tuple[int, ...] | None = None

    @property
    def reorders(self) -> bool:
        """True when the replayed order is not the observed one."""
        return (self.microbatches is not None or self.schedule is not None
                or self.chunks is not None or self.stage_layers is not None)

    def factor(self, stage: int, kind: str) -> float:
        f = 1.0
        for s, k, x in self.scale:
            if s == stage and (k is None or k == kind):
                f *= x
        return f

    def describe(self) -> list[str]:
        out = [f"stage {s}{'' if k is None else ' ' + k} x{x:g}" for s, k, x in self.scale]
        if self.comm_latency_us is not None:
            out.append(f"communication delay {self.comm_latency_us:g} us")
        if self.microbatches is not None:
            out.append(f"M={self.microbatches}")
        if self.schedule is not None:
            out.append(f"schedule {self.schedule}")
        if self.chunks is not None:
            out.append(f"v={self.chunks}")
        if self.stage_layers is not None:
            out.append(f"stage layers {','.join(map(str, self.stage_layers))}")
        return out


def parse_scale(text: str) -> tuple[int, str | None, float]:
    """``"2=0.5"`` or ``"2:B=0.5"`` -> ``(2, None, 0.5)`` / ``(2, "B", 0.5)``."""
    target, sep, value = text.partition("=")
    stage_s, _, kind = target.partition(":")
    try:
        if not sep:
            raise ValueError
        stage, factor = int(stage_s), float(value)
    except ValueError:
        raise ConfigError(f"--scale expects STAGE[:KIND]=FACTOR (e.g. 2=0.5 or 1:B=0.8), "
                          f"got {text!r}") from None
    kind = kind.strip().upper() or None
    if kind is not None and kind not in KINDS:
        raise ConfigError(f"--scale {text!r}: kind must be one of F, B, I, W")
    if not factor > 0:
        raise ConfigError(f"--scale {text!r}: the factor must be > 0")
    return stage, kind, factor


@dataclass
class Prediction:
    """Measured and predicted step time (µs) and bubble, with the assumptions."""

    measured_step_time_us: float
    measured_bubble: float | None
    predicted_step_time_us: float
    predicted_bubble: float
    model: str  # "measured steps" | "typical values"
    before: dict
    after: dict
    changes: list[str]
    assumptions: list[str]
    calibration: dict = field(default_factory=dict)
    per_step: list[dict] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def change(self) -> float:
        """Predicted step time relative to the measured one, minus 1."""
        return self.predicted_step_time_us / self.measured_step_time_us - 1.0

    def to_dict(self) -> dict:
        return {
            "schema_version": SCHEMA_VERSION, "tool": "pipeaudit whatif", "inputs": self.inputs,
            "changes": self.changes, "model": self.model,
            "measured": {"step_time_us": self.measured_step_time_us, "bubble": self.measured_bubble,
                         **self.before},
            "predicted": {"step_time_us": self.predicted_step_time_us,
                          "bubble": self.predicted_bubble, "change": self.change, **self.after},
            "calibration": self.calibration, "assumptions": self.assumptions,
            "per_step": self.per_step, "notes": self.notes,
        }


def whatif(tl: Timeline, changes: Changes, result: AuditResult | None = None) -> Prediction:
    """Predict the step time and bubble of ``tl``'s run with ``changes`` applied.

    ``result`` is the run's audit (computed when not given): it supplies the measured step
    time, bubble and the schedule that ran.
    """
    if changes.comm_latency_us is not None and changes.comm_latency_us < 0:
        raise ConfigError("--comm-latency must be >= 0 us")
    if changes.microbatches is not None and changes.microbatches < 1:
        raise ConfigError("--microbatches must be >= 1")
    if result is None:
        from pipeaudit.audit.run import audit

        result = audit(tl)
    graphs, cal, notes = prepared_graphs(tl)
    S = len(graphs[0].placement)
    _check_scales(changes, graphs, S)
    P = len(graphs[0].ranks)
    before = {"schedule": result.schedule, "num_ranks": P, "num_microbatches":
              result.num_microbatches, "num_chunks": S // P if S % P == 0 else None}
    common = dict(measured_step_time_us=result.step_time_us, measured_bubble=result.bubble.measured,
                  before=before, changes=changes.describe(), inputs=list(tl.inputs), notes=notes)
    if not changes.reorders:
        return _same_order(graphs, changes, common)
    return _new_order(graphs, cal, changes, result.schedule, common, tl.manifest,
                      split_cost(result.device_type))


def _check_scales(changes: Changes, graphs: list[StepGraph], S: int) -> None:
    present = {(n.action.stage, n.action.kind) for g in graphs for n in g.nodes}
    for s, k, _ in changes.scale:
        if not 0 <= s < S:
            raise ConfigError(f"--scale names stage {s}; the run has stages 0..{S - 1}")
        if k is not None and (s, k) not in present:
            kinds = ", ".join(sorted(kk for ss, kk in present if ss == s))
            raise ConfigError(f"--scale {s}:{k}: stage {s} runs no {k} actions (it runs {kinds})")


def _same_order(graphs: list[StepGraph], changes: Changes, common: dict) -> Prediction:
    latency = None if changes.comm_latency_us is None else changes.comm_latency_us * US
    per_step, times, bubbles = [], [], []
    for g in graphs:
        p = run_model(measured_model(g, changes.factor, latency))
        times.append(p.step_time)
        bubbles.append(p.bubble)
        per_step.append({"step": g.step, "measured_us": g.step_time / US,
                         "predicted_us": p.step_time / US, "predicted_bubble": p.bubble})
    assumptions = [
        "each measured step is replayed in its observed order with each action's measured "
        "duration (first to last compute) times its --scale factor",
        "a cross-rank dependency keeps its measured delay where it set the consumer's start; "
        "elsewhere the run's mean delay of that type, capped by the delay the trace shows",
        "same-rank host/launch gaps are kept the same way (measured where they set the start, "
        "else the rank's mean, capped); unchanged, the replay reproduces every step exactly",
        "the predicted step time is the median over steps, the bubble the mean (docs/metrics.md), "
        "with compute scaled like the durations",
    ]
    if latency is not None:
        assumptions.append(f"every cross-rank delay is {changes.comm_latency_us:g} us (measured "
                           "ones replaced)")
    return Prediction(predicted_step_time_us=float(median(times)) / US,
                      predicted_bubble=sum(bubbles) / len(bubbles), model="measured steps",
                      after=dict(common["before"]), assumptions=assumptions, per_step=per_step,
                      **common)


#: What a split backward (I then W, torch's ``stage_backward_input`` and
#: ``stage_backward_weight``) costs over the full backward it replaces, outside the pipeline's
#: first stage (whose I computes nothing and whose W is the whole backward), by the device the
#: stages compute on. CPU, on the harness's blocks against the same run's forwards (so that
#: the microbatch size and the schedule's context cancel): 1.12-1.23, median 1.17 (torch 2.11,
#: P = 4, 16-core host, ZBV at M = 4-16, balanced and a 3x heavier stage); median 1.15 at
#: P = 2 (torch 2.13, 2-core VM). On a GPU none (1.0), as the zero-bubble schedules assume:
#: the one split stage measured there, on an H100 shared by two ranks (torch 2.11, ZBV P = 2,
#: hidden 2048, 2048 tokens per microbatch), took 0.91 x its full backward's kernels (0.97
#: against the same run's forwards).
SPLIT_COST = {"cpu": 1.15}


def split_cost(device_type: str | None) -> float:
    """:data:`SPLIT_COST` for runs on ``device_type`` (1.0, none, where not measured)."""
    return SPLIT_COST.get(device_type or "", 1.0)


def _stage_tables(cal: Calibration, changes: Changes, S: int, cost: float = 1.0
                  ) -> tuple[dict[tuple[int, str], float], dict[tuple[int, str], float],
                             dict[str, str]]:
    """Per old (stage, kind): occupancy and compute with scales applied, all four kinds filled
    (``cost``: a split backward's over the full one, :func:`split_cost`); the third value says
    what was filled: ``"split"`` (I and W from a full B) and ``"full"`` (B from I and W), each
    with its note."""
    notes = {}
    dur: dict[tuple[int, str], float] = {}
    comp: dict[tuple[int, str], float] = {}
    split_filled = full_filled = False
    for s in range(S):
        for table, src in ((dur, cal.duration), (comp, cal.compute)):
            f = {k: src[(s, k)] * changes.factor(s, k) for k in KINDS if (s, k) in src}
            if "B" not in f and "I" in f:
                f["B"] = (f["I"] + f.get("W", 0.0)) / (1.0 if s == 0 else cost)
                full_filled = True
            if "B" in f and "I" not in f:
                f["I"] = f["W"] = f["B"] * cost / 2
                split_filled = True
            f.setdefault("F", 0.0)
            f.setdefault("B", 0.0)
            f.setdefault("I", 0.0)
            f.setdefault("W", 0.0)
            for k, v in f.items():
                table[(s, k)] = v
    if split_filled:
        notes["split"] = (f"the run has full backwards only: a split I and W each take half "
                          f"of {cost:g} x B (the split's own cost on this device), the first "
                          "stage's I nothing and its W the whole B")
    if full_filled:
        notes["full"] = (f"the run has split backwards only: a full B takes (I + W) / {cost:g} "
                         "(the first stage's: I + W)")
    return dur, comp, notes


def _split_from_full(tables: tuple[dict, ...], num_stages: int, cost: float) -> None:
    """Each stage's I and W from its full B, in place: half of ``cost`` x B each, but the
    first stage's (I nothing, W the whole B)."""
    for t in tables:
        for s in range(num_stages):
            b = t[(s, "B")]
            t[(s, "I")], t[(s, "W")] = (0.0, b) if s == 0 else (b * cost / 2,) * 2


def _rederive(dur: dict, comp: dict, old_place: list[int], new_place: tuple[int, ...],
              mb: float, shares: Shares | None = None) -> tuple[dict, dict, str | None]:
    """Per new (stage, kind) durations, all times ``mb``: the old ones when the stages are the
    same; else, with ``shares`` (:mod:`pipeaudit.explain.layers`), the sum of the new stage's
    layers (each its old stage's value over that stage's layers); else each rank's total per
    kind split evenly over its new stages. The third value says which re-derivation ran."""
    if tuple(new_place) == tuple(old_place) and shares is None:
        return ({k: v * mb for k, v in dur.items()}, {k: v * mb for k, v in comp.items()}, None)
    new_dur, new_comp = {}, {}
    if shares is not None:
        for k in KINDS:
            for table, src in ((new_dur, dur), (new_comp, comp)):
                per_stage = restage({o: src[(o, k)] for o in range(len(old_place))}, shares)
                table.update({(s, k): max(0.0, v) * mb for s, v in per_stage.items()})
        return new_dur, new_comp, "layers"
    for r in set(new_place):
        old = [s for s, x in enumerate(old_place) if x == r]
        new = [s for s, x in enumerate(new_place) if x == r]
        for k in KINDS:
            for s in new:
                new_dur[(s, k)] = sum(dur[(o, k)] for o in old) / len(new) * mb
                new_comp[(s, k)] = sum(comp[(o, k)] for o in old) / len(new) * mb
    return new_dur, new_comp, "ranks"


def _new_order(graphs: list[StepGraph], cal: Calibration, changes: Changes, ran: str | None,
               common: dict, manifest: dict | None = None, cost: float = 1.0) -> Prediction:
    g0 = graphs[0]
    P, S = len(g0.ranks), len(g0.placement)
    v_old = S // P if S % P == 0 else None
    M_old = common["before"]["num_microbatches"]
    if changes.schedule is None and ran is None:
        raise ConfigError("the run's schedule was not recognised: name the schedule to replay "
                          "with --schedule")
    name = canonical_name(changes.schedule or ran)
    same = ran is not None and name == canonical_name(ran)
    v_new = changes.chunks or (v_old if same and v_old else default_chunks(name))
    M_new = changes.microbatches or M_old
    sched = build_schedule(name, P, M_new, v_new)
    dur, comp, filled = _stage_tables(cal, changes, S, cost)
    kinds_used = {a.kind for o in sched.orders for a in o}
    assumptions = [note for what, note in filled.items()
                   if (what == "split" and "I" in kinds_used)
                   or (what == "full" and "B" in kinds_used)]
    latency = None if changes.comm_latency_us is None else changes.comm_latency_us * US
    mb = M_old / M_new

    old_layers = manifest_layers(manifest, S)
    shares, lm, target = None, None, None
    if old_layers and changes.stage_layers is None and sum(old_layers) < sched.num_stages:
        old_layers = None  # fewer layers than the new stages: no split gives each one a layer
    if old_layers:
        given = changes.stage_layers
        if given is None and sched.num_stages == S:
            given = old_layers  # the same stages keep the run's own split
        target = candidate_layers(old_layers, sched.num_stages, given)
        if tuple(sched.placement) != tuple(g0.placement) or target != old_layers:
            lm = layer_model(old_layers, [comp[(o, "F")] + comp[(o, "B")] for o in range(S)])
            shares = lm.shares(target)
    elif changes.stage_layers is not None:
        raise ConfigError("a split layer by layer needs the run's layers per stage (the "
                          "manifest's stage_layers, or advise --stage-layers)")
    new_dur, new_comp, moved = _rederive(dur, comp, g0.placement, sched.placement, mb, shares)
    if "I" in kinds_used and (moved is not None or "split" in filled):
        # the candidate splits backwards the run did not split, or on other stages
        _split_from_full((new_dur, new_comp), sched.num_stages, cost)
    if moved == "layers":
        assumptions.append(
            f"stages re-derived per layer ({len(g0.placement)} -> {sched.num_stages} stages, "
            f"layers {','.join(map(str, target))}): {lm.describe()}; a heavy layer stays heavy "
            "on the rank that now holds it")
    elif moved == "ranks":
        assumptions.append(
            f"stages re-derived: each rank's measured compute per kind is split evenly over its "
            f"{sched.chunks} new stage(s) ({len(g0.placement)} -> {sched.num_stages} stages); a "
            "rank keeps its share of the model, so an imbalance between ranks stays")
    if ran is not None:
        before, after_rt = torch_runtime(canonical_name(ran)), torch_runtime(name)
        if before and after_rt and before != after_rt:
            assumptions.append(
                f"the run executed on torch's {before}, {name} executes on {after_rt}: their "
                "host overhead per action differs (bundled P=2 samples, rank 0: 0.81 ms per "
                "action for 1f1b, 1.60 ms for interleaved-1f1b); the run's gaps are kept")
    if mb != 1.0:
        assumptions.append(
            f"same global batch: M {M_old} -> {M_new}, so each action's compute scales by "
            f"M_old/M_new = {mb:g} (linear in the microbatch size; small microbatches are often "
            "less efficient than that on GPUs)")
    cal_new, comm_note = _delays_at(cal, manifest, M_old, M_new, latency is not None)
    model = typical_model(sched.orders, sched.placement, lambda s, k: new_dur[(s, k)],
                          lambda s, k: new_comp[(s, k)], cal_new, latency, pairs=sched.pairs)
    pred = run_model(model)

    # calibration: the same typical model on the observed order, nothing changed
    dur_raw, comp_raw, _ = _stage_tables(cal, Changes(), S, cost)
    unchanged = _run_with_pairs(typical_model(g0.action_orders(), g0.placement,
                                              lambda s, k: dur_raw[(s, k)],
                                              lambda s, k: comp_raw[(s, k)], cal,
                                              pairs=_run_pairs(common["before"])))
    measured = common["measured_step_time_us"]
    assumptions += [
        f"order: the catalogue's {name} order for P={P}, M={M_new}, v={sched.chunks}",
        "each (stage, kind) takes its mean measured duration (first to last compute) over "
        "all steps and microbatches",
        comm_note if latency is None
        else f"every cross-rank delay is {changes.comm_latency_us:g} us",
        "host/launch gap before every action but a rank's first: the rank's mean measured gap",
        "the step time is the replay's window; the bubble uses the mean compute time of each "
        "(stage, kind)",
    ]
    calibration = {
        "unchanged_prediction_us": unchanged.step_time / US,
        "measured_us": measured,
        "error": unchanged.step_time / US / measured - 1.0,
        "unchanged_bubble": unchanged.bubble,
        "what": "the same typical-value model replayed on the observed order with nothing "
                "changed, against the measured median step time",
        **cal.to_dict(g0.ranks),
    }
    after = {"schedule": name, "num_ranks": P, "num_microbatches": M_new,
             "num_chunks": sched.chunks}
    return Prediction(predicted_step_time_us=pred.step_time / US, predicted_bubble=pred.bubble,
                      model="typical values", after=after, assumptions=assumptions,
                      calibration=calibration, **common)


def _delays_at(cal: Calibration, manifest: dict | None, M_old: int, M_new: int,
               overridden: bool) -> tuple[Calibration, str]:
    """The run's cross-rank delays for messages of ``M_new`` microbatches, and what was assumed:
    each moved by the change of its message over the bandwidth of the link the harness timed
    (:mod:`pipeaudit.explain.link`), else kept as measured."""
    measured = (f"the run's mean delay per type (activation "
                f"{cal.comm.get('activation', 0) / US:.0f} us, gradient "
                f"{cal.comm.get('gradient', 0) / US:.0f} us)")
    if overridden or M_new == M_old:
        return cal, f"cross-rank delays: {measured}"
    link, what = scaling_link(manifest)
    if link is None:
        return cal, (f"cross-rank delays: {measured}, not rescaled with the microbatch size "
                     f"({what})")
    old, new = activation_bytes(manifest, M_old), activation_bytes(manifest, M_new)
    delta = link.delay_change_ns(old, new)
    comm = {t: max(0.0, d + delta) for t, d in cal.comm.items()}
    return replace(cal, comm=comm), (
        f"cross-rank delays: {measured}, each {delta / US:+.0f} us for its message of "
        f"{new / 1e6:.3g} MB instead of {old / 1e6:.3g} MB over the link the run timed "
        f"({what})")


def _run_pairs(before: dict) -> frozenset:
    """The overlapped F/B pairs of the schedule the run ran (DualPipeV), when it is known
    (``before``: the prediction's description of the run)."""
    from pipeaudit.errors import ScheduleError
    from pipeaudit.schedules import build_schedule

    if not before.get("schedule"):
        return frozenset()
    chunks = before.get("num_chunks")
    try:
        sched = build_schedule(before["schedule"], before["num_ranks"], before["num_microbatches"],
                               chunks if chunks and chunks > 1 else None)
    except ScheduleError:
        return frozenset()
    return sched.pairs


def _run_with_pairs(model):
    """Replay ``model``; without its pairs when the order does not hold them."""
    import dataclasses

    from pipeaudit.errors import ScheduleError

    try:
        return run_model(model)
    except ScheduleError:
        if not model.pairs:
            raise
        return run_model(dataclasses.replace(model, pairs=frozenset()))
