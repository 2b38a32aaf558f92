"""The gate's comparison model: checks of a run against a baseline and against budgets.

Every check compares the *median of per-step values* (``diff`` reads the same medians).
Against a baseline, a check fails when its change exceeds both its threshold and the noise
band, ``noise_k`` standard errors of the change of the two medians (from the baseline's
step-to-step spread, scaled MAD, over the steps of both sides, :mod:`pipeaudit.gate.stats`);
it warns when the change exceeds the threshold but stays inside that noise band. A check
whose band is wider than its threshold cannot be gated at it: the result says so in one line
with the steps a baseline and a run need (:meth:`GateResult.noisy_line`).
Budgets fail when the run's median exceeds them. Each check explains itself,
naming the rank or stage that moved and why.
"""

from __future__ import annotations

from typing import Callable

from pipeaudit.actions import KINDS
from pipeaudit.gate import stats
from pipeaudit.gate.budgets import budget_checks
from pipeaudit.values import fmt_change, fmt_value
from pipeaudit.gate.model import VERDICTS, Check, GateResult
from pipeaudit.audit.result import StepSeries
from pipeaudit.gate.snapshot import Snapshot
from pipeaudit.gate.thresholds import Thresholds

__all__ = ["Check", "GateResult", "VERDICTS", "gate", "fmt_change", "fmt_value"]


def gate(run: Snapshot, baseline: Snapshot | None, thresholds: Thresholds, *,
         allow_config_change: bool = False, thresholds_file: str | None = None) -> GateResult:
    """All checks of ``run`` against ``baseline`` (when given) and the budgets in ``thresholds``.

    Raises :class:`ConfigError` when the configurations differ and
    ``allow_config_change`` is false, or when a side has no per-step series.
    """
    from pipeaudit.errors import ConfigError

    if run.series is None:
        raise ConfigError(f"{run.source}: an analyze report holds no per-step series; gate the "
                          "traces or a baseline written by `pipeaudit baseline`")
    result = GateResult(checks=[], run_source=run.source, run_config=run.config,
                        thresholds=thresholds, thresholds_file=thresholds_file)
    if baseline is not None:
        if baseline.series is None:
            raise ConfigError(f"{baseline.source}: not a baseline (no per-step series)")
        changes = baseline.config.differences(run.config)
        if changes and not allow_config_change:
            raise ConfigError(f"{baseline.source}: baseline configuration differs from the run's "
                              f"({'; '.join(changes)}); pass --allow-config-change to compare "
                              "anyway")
        result.baseline_source, result.baseline_config = baseline.source, baseline.config
        result.config_changes = changes
        if changes:
            result.notes.append("configuration changed since the baseline: " + "; ".join(changes))
        result.checks += _Compare(baseline, run, thresholds).checks()
        if len(baseline.series.steps) < 3:
            result.notes.append(f"the baseline has {len(baseline.series.steps)} step(s): with fewer "
                                "than 3 steps the median is not robust to one slow step; profile "
                                "more steps (e.g. --steps 5)")
    result.checks += budget_checks(run, thresholds)
    if not result.checks:
        raise ConfigError("nothing to check: give --baseline or at least one budget "
                          "(--max-bubble, --max-step-time-ms, ...)")
    return result


def _judge(change: float | None, threshold: float | None, noise: float) -> str:
    if threshold is None or change is None:
        return "skip"
    if change > max(threshold, noise):
        return "fail"
    if change > threshold:
        return "warn"
    return "pass"


class _Compare:
    """Baseline-vs-run checks; one method per metric family."""

    def __init__(self, base: Snapshot, run: Snapshot, th: Thresholds) -> None:
        self.b, self.n, self.th = base, run, th
        self.bs: StepSeries = base.series  # type: ignore[assignment]
        self.ns: StepSeries = run.series  # type: ignore[assignment]
        self.k = th.noise_k

    def checks(self) -> list[Check]:
        out = [self.bubble(), self.step_time(), self.imbalance(), self.exposed_comm()]
        out += self.rank_bubbles()
        out += self.stage_computes()
        out += self.inflight()
        out += self.memory()
        return out

    # -- generic

    def _check(self, metric: str, scope: str, index: int | None, base: list, now: list,
               mode: str, unit: str, threshold: float | None,
               why: Callable[[float], str] | None = None) -> Check:
        bm, nm = stats.median(base), stats.median(now)
        nb, nn = len(stats.values(base)), len(stats.values(now))
        noise = stats.median_noise(stats.spread(base), self.k, nb, nn)
        if mode == "rel":
            change = stats.relative_change(bm, nm)
            if change is None and bm == 0 and nm is not None:
                change = 0.0 if nm == 0 else float("inf")
            noise = noise / abs(bm) if bm else 0.0
        else:
            change = None if bm is None or nm is None else nm - bm
        verdict = _judge(change, threshold, noise)
        c = Check(metric=metric, scope=scope, index=index, baseline=bm, now=nm, change=change,
                  mode=mode, threshold=threshold, noise=noise, unit=unit, verdict=verdict,
                  explanation="")
        if c.too_noisy:
            c.steps_needed = stats.steps_to_gate(noise, threshold, nb, nn)  # type: ignore[arg-type]
        c.explanation = self._explain(c, why)
        return c

    def _explain(self, c: Check, why: Callable[[float], str] | None) -> str:
        what = c.name
        if c.verdict == "skip":
            return f"{what}: check switched off" if c.threshold is None else f"{what}: not measured"
        head = (f"{what} {fmt_value(c.baseline, c.unit)} -> {fmt_value(c.now, c.unit)} "
                f"({fmt_change(c.change, c.mode, c.unit)}")
        if c.verdict == "pass":
            return head + f", limit {fmt_change(c.threshold, c.mode, c.unit)})"
        if c.verdict == "warn":
            return (head + f") exceeds the threshold {fmt_change(c.threshold, c.mode, c.unit)} "
                    f"but stays within the noise of the medians "
                    f"({fmt_change(c.noise, c.mode, c.unit)}: the baseline's step-to-step noise "
                    f"over {len(self.bs.steps)} and {len(self.ns.steps)} steps); not counted as a "
                    "regression")
        reason = why(c.change) if why else ""
        limit = fmt_change(c.limit, c.mode, c.unit)
        return head + f", limit {limit})" + (f": {reason}" if reason else "")

    # -- attribution helpers

    def stage_changes(self) -> dict[int, float]:
        """Relative change of the median compute per step, per stage in both runs."""
        out = {}
        for s in sorted(set(self.bs.stage_compute_us) & set(self.ns.stage_compute_us)):
            ch = stats.relative_change(stats.median(self.bs.stage_total_us(s)),
                                       stats.median(self.ns.stage_total_us(s)))
            if ch is not None:
                out[s] = ch
        return out

    def kind_changes(self, s: int) -> dict[str, float]:
        out = {}
        for k in KINDS:
            ch = stats.relative_change(stats.median(self.bs.stage_compute_us[s].get(k, [])),
                                       stats.median(self.ns.stage_compute_us[s].get(k, [])))
            if ch is not None:
                out[k] = ch
        return out

    def heavier_stages(self) -> list[tuple[int, float]]:
        """Stages whose compute grew past the stage threshold, the largest first."""
        lim = self.th.max_stage_compute_increase
        lim = 0.05 if lim is None else lim
        return sorted(((s, ch) for s, ch in self.stage_changes().items() if ch > lim),
                      key=lambda x: -x[1])

    def _heavier_text(self, limit: int = 2) -> str:
        heavy = self.heavier_stages()
        if not heavy:
            return ""
        parts = [f"stage {s} compute {100 * ch:+.0f}%" for s, ch in heavy[:limit]]
        noun = "stage" if len(heavy) == 1 else "stages"
        names = ", ".join(str(s) for s, _ in heavy[:limit])
        return f"{noun} {names} got heavier ({', '.join(parts)})"

    def _split_text(self) -> str:
        """The bubble change split into imbalance (replay ideal) and overhead parts."""
        b0, b1 = self.b.audit.bubble, self.n.audit.bubble
        if None in (b0.replay_ideal, b1.replay_ideal, b0.measured, b1.measured):
            return ""
        d_ideal = b1.replay_ideal - b0.replay_ideal  # type: ignore[operator]
        d_over = (b1.measured - b1.replay_ideal) - (b0.measured - b0.replay_ideal)  # type: ignore[operator]
        return (f"{100 * d_ideal:+.1f} pts from uneven stages and F/B/W durations (replay ideal "
                f"{fmt_value(b0.replay_ideal, 'fraction')} -> {fmt_value(b1.replay_ideal, 'fraction')})"
                f" and {100 * d_over:+.1f} pts from communication, waits and host overhead")

    def _exposed_text(self) -> str:
        worst = self._worst_exposed_rank()
        if worst is None:
            return ""
        r, ch = worst
        return f"rank {r} exposed communication {100 * ch:+.1f} pts of the step"

    def _worst_exposed_rank(self) -> tuple[int, float] | None:
        changes = {}
        for r in set(self.bs.rank_exposed_comm) & set(self.ns.rank_exposed_comm):
            bm = stats.median(self.bs.rank_exposed_comm[r])
            nm = stats.median(self.ns.rank_exposed_comm[r])
            if bm is not None and nm is not None:
                changes[r] = nm - bm
        if not changes:
            return None
        r = max(changes, key=lambda x: changes[x])
        return (r, changes[r]) if changes[r] > 0.01 else None

    @staticmethod
    def _join(*parts: str) -> str:
        return "; ".join(p for p in parts if p)

    # -- pipeline checks

    def bubble(self) -> Check:
        return self._check("bubble", "pipeline", None, self.bs.bubble, self.ns.bubble, "abs",
                           "fraction", self.th.max_bubble_increase,
                           lambda ch: self._join(self._heavier_text(), self._split_text())
                           or "no stage got heavier: the pipeline waits longer on communication "
                              "or host overhead")

    def step_time(self) -> Check:
        return self._check("step_time", "pipeline", None, self.bs.step_time_us,
                           self.ns.step_time_us, "rel", "us", self.th.max_step_time_increase,
                           lambda ch: self._join(self._heavier_text(), self._exposed_text())
                           or "no stage got heavier: the time went to waits, communication or "
                              "host overhead (`pipeaudit explain` shows the critical path)")

    def imbalance(self) -> Check:
        def why(ch: float) -> str:
            now = {s: stats.median(self.ns.stage_total_us(s)) or 0.0 for s in self.ns.stage_compute_us}
            heavy = max(now, key=lambda s: now[s])
            med = stats.median(now.values()) or 0.0
            return (f"stage {heavy} is the heaviest ({fmt_value(now[heavy], 'us')} per step, "
                    f"median stage {fmt_value(med, 'us')})" +
                    (f"; {self._heavier_text()}" if self.heavier_stages() else ""))

        return self._check("imbalance", "pipeline", None, self.bs.imbalance, self.ns.imbalance,
                           "abs", "ratio", self.th.max_imbalance_increase, why)

    def exposed_comm(self) -> Check:
        def why(ch: float) -> str:
            worst = self._worst_exposed_rank()
            where = f"most on rank {worst[0]} ({100 * worst[1]:+.1f} pts)" if worst else ""
            return self._join(where, "more of the step goes to communication that no compute "
                                     "hides (slower transfers, longer recv waits or lost overlap)")

        return self._check("exposed_comm", "pipeline", None, self.bs.exposed_comm,
                           self.ns.exposed_comm, "abs", "fraction",
                           self.th.max_exposed_comm_increase, why)

    # -- rank and stage checks

    def rank_bubbles(self) -> list[Check]:
        out = []
        for r in sorted(set(self.bs.rank_bubble) & set(self.ns.rank_bubble)):
            out.append(self._check("rank_bubble", "rank", r, self.bs.rank_bubble[r],
                                   self.ns.rank_bubble[r], "abs", "fraction",
                                   self.th.max_rank_bubble_increase,
                                   lambda ch, r=r: self._rank_why(r)))
        return out

    def _rank_why(self, r: int) -> str:
        own = [s for s in self.n.audit.stages if s.rank == r]
        changes = self.stage_changes()
        heavy = [(s, ch) for s, ch in self.heavier_stages() if s not in {x.stage for x in own}]
        own_ch = [changes[s.stage] for s in own if s.stage in changes]
        if heavy:
            s, ch = heavy[0]
            return f"rank {r} waits longer on stage {s}, whose compute grew {100 * ch:+.0f}%"
        if own_ch and min(own_ch) < -0.05:
            return f"rank {r}'s own stage computes {100 * min(own_ch):+.0f}% in a window as long"
        ex = self.ns.rank_exposed_comm.get(r), self.bs.rank_exposed_comm.get(r)
        if ex[0] is not None and ex[1] is not None:
            d = (stats.median(ex[0]) or 0.0) - (stats.median(ex[1]) or 0.0)
            if d > 0.01:
                return f"rank {r} has {100 * d:+.1f} pts more exposed communication"
        return f"no stage got heavier: rank {r} waits on communication or host overhead"

    def stage_computes(self) -> list[Check]:
        out = []
        for s in sorted(set(self.bs.stage_compute_us) & set(self.ns.stage_compute_us)):
            c = self._check("stage_compute", "stage", s, self.bs.stage_total_us(s),
                            self.ns.stage_total_us(s), "rel", "us",
                            self.th.max_stage_compute_increase)
            if c.verdict == "fail":  # "stage 1 compute per step +180% (F +175%, B +182%): ..."
                kinds = self.kind_changes(s)
                parts = ", ".join(f"{k} {100 * v:+.0f}%" for k, v in kinds.items())
                c.explanation = (f"stage {s} compute per step {fmt_change(c.change, 'rel', 'us')}"
                                 f"{f' ({parts})' if parts else ''}: stage {s} got heavier "
                                 f"({fmt_value(c.baseline, 'us')} -> {fmt_value(c.now, 'us')} "
                                 f"per step, limit {fmt_change(c.limit, 'rel', 'us')})")
            out.append(c)
        return out

    def inflight(self) -> list[Check]:
        out = []
        for s in sorted(set(self.bs.stage_peak_inflight) & set(self.ns.stage_peak_inflight)):
            out.append(self._check(
                "peak_inflight", "stage", s, self.bs.stage_peak_inflight[s],
                self.ns.stage_peak_inflight[s], "abs", "count", self.th.max_inflight_increase,
                lambda ch, s=s: f"stage {s} holds the activations of {ch:.0f} more microbatch(es) "
                                "at once: the schedule's order changed"))
        return out

    def memory(self) -> list[Check]:
        bm, nm = self.bs.rank_peak_memory, self.ns.rank_peak_memory
        if not bm or not nm:
            missing = ("baseline and run" if not bm and not nm else "baseline" if not bm else "run")
            return [Check("peak_memory", "pipeline", None, None, None, None, "rel",
                          self.th.max_peak_memory_increase, None, "bytes", "skip",
                          f"peak memory: not measured (no [memory] events in the {missing}; "
                          "profile with --profile-memory)")]
        out = []
        for r in sorted(set(bm) & set(nm)):
            def why(ch: float, r: int = r) -> str:
                grown = [s for s in sorted(self.ns.stage_peak_inflight)
                         if any(st.stage == s and st.rank == r for st in self.n.audit.stages)
                         and (stats.median(self.ns.stage_peak_inflight[s]) or 0)
                         > (stats.median(self.bs.stage_peak_inflight.get(s, [])) or 0)]
                if grown:
                    return f"stage {grown[0]} on rank {r} holds more microbatches in flight"
                return f"rank {r} allocates more (activations, parameters or buffers)"

            out.append(self._check("peak_memory", "rank", r, bm[r], nm[r], "rel", "bytes",
                                   self.th.max_peak_memory_increase, why))
        return out
