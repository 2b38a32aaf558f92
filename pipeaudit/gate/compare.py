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

A rise of the pipeline's shape (a bubble, the stage imbalance, exposed communication) is
judged by the part of it that a regression accounts for: for a bubble or exposed
communication, the rise a step that grew from T to T' gives at the baseline's compute
((1 - b) (1 - T / T')); for the imbalance, the rise the heaviest stage's growth gives. A
rank whose own stage got faster idles longer in a step as long: its bubble rises, and that
is no regression (the check passes, ``cleared``, naming the cause). When every stage slowed
by about the same factor and the shape held, a slower or busier host explains it: the checks
of step time and stage compute warn rather than fail (unless past ``max_host_slowdown``),
and their explanations and a note name the host rather than a heavier stage.
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

#: Every stage slowed (or sped up) by at least this much, relative, for the host to be named.
UNIFORM_MIN = 0.05
#: A stage computes this much less (relative) to be named as the cause of a bubble rise.
FASTER = 0.05


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
        result.baseline_steps = len(baseline.series.steps)
        result.config_changes = changes
        if changes:
            result.notes.append("configuration changed since the baseline: " + "; ".join(changes))
        compare = _Compare(baseline, run, thresholds)
        result.checks += compare.checks()
        result.notes += baseline.notes + compare.notes
        if len(baseline.series.steps) < 3 and result.noisy_line() is None:  # else it says so
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
        self.notes: list[str] = []
        t0, t1 = stats.median(self.bs.step_time_us), stats.median(self.ns.step_time_us)
        #: relative change of the median step time, and the share of the run's step that the
        #: step grew by (0 when it did not grow)
        self.step_change = stats.relative_change(t0, t1)
        self.growth = max(0.0, 1.0 - t0 / t1) if t0 and t1 else 0.0
        #: (smallest, largest) stage compute factor when every stage slowed or sped up alike
        #: and the pipeline's shape held (see :meth:`_uniform`)
        self.uniform: tuple[float, float] | None = None

    def checks(self) -> list[Check]:
        bubble, imbalance, exposed = self.bubble(), self.imbalance(), self.exposed_comm()
        self.uniform = self._uniform([bubble, imbalance, exposed])
        out = [bubble, self.step_time(), imbalance, exposed]
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
        if threshold is not None and noise > threshold:
            c.steps_needed = stats.steps_to_gate(noise, threshold, nb, nn)
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
        """Stages whose compute grew past the stage threshold, the largest first (none when
        every stage slowed alike: the host, not a stage)."""
        if self.uniform is not None:
            return []
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

    # -- the step, the host and rises of the pipeline's shape

    def _step_text(self) -> str:
        """``a step 26% longer (386.06 ms -> 485.01 ms)``."""
        t0, t1 = stats.median(self.bs.step_time_us), stats.median(self.ns.step_time_us)
        ch = self.step_change or 0.0
        how = f"{100 * abs(ch):.0f}% {'longer' if ch >= 0 else 'shorter'}"
        return f"a step {how} ({fmt_value(t0, 'us')} -> {fmt_value(t1, 'us')})"

    def _faster_stages(self, stages: list[int] | None = None) -> list[tuple[int, float]]:
        """Stages (of ``stages``, default all) that compute at least :data:`FASTER` less."""
        ch = self.stage_changes()
        return sorted(((st, c) for st, c in ch.items() if c < -FASTER
                       and (stages is None or st in stages)), key=lambda x: x[1])

    def _rise(self, c: Check, part: float, why: Callable[[float], str], cleared: str,
              heavier: bool = False) -> Check:
        """Re-judge a rise above the threshold by ``part``, the share of it a regression
        accounts for (a longer step, a heavier stage): within the threshold the check passes,
        ``cleared``, with the ``cleared`` cause; else it fails past the noise band (warns
        within it), explained by ``why``. ``heavier``: a stage the rise may wait on got
        heavier, so the whole rise is judged."""
        if c.verdict == "skip" or c.change is None or c.threshold is None \
                or c.change <= c.threshold:
            return c
        judged = c.change if heavier else min(c.change, max(part, 0.0))
        if judged <= c.threshold:
            c.verdict, c.cleared = "pass", True
            c.explanation = (f"{c.name} {fmt_value(c.baseline, c.unit)} -> "
                             f"{fmt_value(c.now, c.unit)} ({fmt_change(c.change, c.mode, c.unit)}"
                             f", limit {fmt_change(c.limit, c.mode, c.unit)}) is no regression: "
                             f"{cleared}")
            return c
        c.verdict = "fail" if judged > (c.limit or 0.0) else "warn"
        c.explanation = self._explain(c, why)
        return c

    def _from_step(self, ch: float, part: float) -> str:
        """``a step 26% longer (...)`` when it accounts for all of the rise ``ch``, else
        ``+3.1 pts of it from a step 4% longer (...)``."""
        return (f"all of it from {self._step_text()}" if part >= ch else
                f"{100 * max(part, 0.0):+.1f} pts of it from {self._step_text()}")

    def _step_part(self, base_share: list) -> float:
        """The rise of a share of the step (bubble, exposed communication) that the step's
        growth gives at the baseline's value: (1 - share) (1 - T / T')."""
        b = stats.median(base_share)
        return (1.0 - (b or 0.0)) * self.growth

    def _not_slower(self) -> str:
        ch = self.step_change
        return ("the step is not slower" if ch is None else
                f"the step is not slower ({100 * ch:+.1f}%, limit "
                f"{fmt_change(self.th.max_step_time_increase, 'rel', 'us')})")

    def _uniform(self, shape: list[Check]) -> tuple[float, float] | None:
        """(smallest, largest) factor of stage compute when every stage slowed (or sped up)
        by about the same factor and the pipeline's shape held (bubble, imbalance, exposed
        communication within their limits); adds the note that names the host."""
        ch = self.stage_changes()
        if len(ch) < 2:
            return None
        lo, hi = 1.0 + min(ch.values()), 1.0 + max(ch.values())
        held = all(c.change is None or c.limit is None or c.change <= c.limit for c in shape)
        # "about the same factor": no further apart than two stages whose max / mean moves by
        # the imbalance threshold t, hi / lo <= (1 + t) / (1 - t) (1.35 at t = 0.15)
        t = min(self.th.max_imbalance_increase if self.th.max_imbalance_increase is not None
                else 0.15, 0.5)
        if not held or lo <= 0 or hi / lo > (1.0 + t) / (1.0 - t):
            return None
        factor = f"{lo:.2f}x" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}x to {hi:.2f}x"
        same = (f"every stage computes {factor} as long as in the baseline and the pipeline's "
                "shape held (bubble, imbalance, exposed communication)")
        if lo > 1.0 + UNIFORM_MIN:
            gated = ("not counted as a regression: the verdict stands on the pipeline's shape "
                     "(max_host_slowdown sets a limit for such a slowdown)"
                     if self.th.max_host_slowdown is None else
                     "max_host_slowdown "
                     f"{fmt_change(self.th.max_host_slowdown, 'rel', 'us')} limits it")
            self.notes.append(f"{same}: the host looks slower or busier than the baseline's, "
                              f"not a stage that got heavier; {gated}")
            return lo, hi
        if hi < 1.0 - UNIFORM_MIN:
            self.notes.append(f"{same}: the host looks faster or quieter than the baseline's; "
                              "a regression of that size could hide behind it (gate against a "
                              "baseline made on the same kind of host, under the same load)")
        return None

    def _host_text(self) -> str:
        lo, hi = self.uniform  # type: ignore[misc]
        a, b = f"{100 * (lo - 1):+.0f}%", f"{100 * (hi - 1):+.0f}%"
        return (f"every stage slowed alike ({a if a == b else f'{a} to {b}'}) and the "
                "pipeline's shape held: the host looks slower or busier than the baseline's")

    # -- pipeline checks

    def bubble(self) -> Check:
        c = self._check("bubble", "pipeline", None, self.bs.bubble, self.ns.bubble, "abs",
                        "fraction", self.th.max_bubble_increase)
        part = self._step_part(self.bs.bubble)

        def why(ch: float) -> str:
            return self._join(self._from_step(ch, part), self._heavier_text(),
                              self._split_text()) \
                or "no stage got heavier: the pipeline waits longer on communication or host overhead"

        faster = self._faster_stages()
        names = ", ".join(f"stage {st} {100 * ch:+.0f}%" for st, ch in faster[:3])
        cleared = (f"{'stages compute' if len(faster) > 1 else 'a stage computes'} less ({names})"
                   f" and {self._not_slower()}" if faster else self._not_slower())
        return self._rise(c, part, why, cleared, heavier=bool(self.heavier_stages()))

    def step_time(self) -> Check:
        def why(ch: float) -> str:
            if self.uniform is not None:
                return self._host_text()
            return self._join(self._heavier_text(), self._exposed_text()) or (
                "no stage got heavier: the time went to waits, communication or host overhead "
                "(`pipeaudit explain` shows the critical path)")

        return self._host(self._check("step_time", "pipeline", None, self.bs.step_time_us,
                                      self.ns.step_time_us, "rel", "us",
                                      self.th.max_step_time_increase, why))

    def _host(self, c: Check) -> Check:
        """A failed step-time or stage-compute check when every stage slowed alike and the
        shape held: it warns, naming the host, unless it also exceeds ``max_host_slowdown``
        (a stage's check says it briefly: the step time's says it all)."""
        if self.uniform is None or c.verdict != "fail" or c.change is None:
            return c
        lim = self.th.max_host_slowdown
        cause = (f"{self._host_text()} (or the work of every stage grew alike)"
                 if c.metric == "step_time" else "slowed as every stage did (the host)")
        head = (f"{c.name} {fmt_value(c.baseline, c.unit)} -> {fmt_value(c.now, c.unit)} "
                f"({fmt_change(c.change, c.mode, c.unit)}, limit "
                f"{fmt_change(c.limit, c.mode, c.unit)}): {cause}")
        if lim is not None and c.change > lim:
            c.explanation = head + f", past max_host_slowdown {fmt_change(lim, 'rel', 'us')}"
            return c
        c.verdict = "warn"
        c.explanation = head + ("; not counted as a regression (max_host_slowdown gates it)"
                                if lim is None else
                                f"; within max_host_slowdown {fmt_change(lim, 'rel', 'us')}")
        return c

    def _heaviest_per_step(self, s) -> list[float]:
        totals = [s.stage_total_us(st) for st in s.stage_compute_us]
        return [max(col) for col in zip(*totals)] if totals else []

    def imbalance(self) -> Check:
        def why(ch: float) -> str:
            now = {s: stats.median(self.ns.stage_total_us(s)) or 0.0 for s in self.ns.stage_compute_us}
            heavy = max(now, key=lambda s: now[s])
            med = stats.median(now.values()) or 0.0
            return (f"stage {heavy} is the heaviest ({fmt_value(now[heavy], 'us')} per step, "
                    f"median stage {fmt_value(med, 'us')})" +
                    (f"; {self._heavier_text()}" if self.heavier_stages() else ""))

        c = self._check("imbalance", "pipeline", None, self.bs.imbalance, self.ns.imbalance,
                        "abs", "ratio", self.th.max_imbalance_increase)
        m0 = stats.median(self._heaviest_per_step(self.bs))
        m1 = stats.median(self._heaviest_per_step(self.ns))
        i0 = stats.median(self.bs.imbalance)
        part = (i0 or 0.0) * (m1 / m0 - 1.0) if m0 and m1 else 0.0
        faster = self._faster_stages()
        names = ", ".join(f"stage {st} {100 * ch:+.0f}%" for st, ch in faster[:3])
        cleared = ("no stage got heavier: the heaviest stage computes "
                   f"{fmt_value(m0, 'us')} -> {fmt_value(m1, 'us')} per step"
                   + (f" and lighter stages compute less ({names}), so the median is lower"
                      if faster else ""))
        return self._rise(c, part, why, cleared, heavier=bool(self.heavier_stages()))

    def exposed_comm(self) -> Check:
        def why(ch: float) -> str:
            worst = self._worst_exposed_rank()
            where = f"most on rank {worst[0]} ({100 * worst[1]:+.1f} pts)" if worst else ""
            return self._join(where, "more of the step goes to communication that no compute "
                                     "hides (slower transfers or lost overlap)")

        c = self._check("exposed_comm", "pipeline", None, self.bs.exposed_comm,
                        self.ns.exposed_comm, "abs", "fraction",
                        self.th.max_exposed_comm_increase)
        return self._rise(c, self._step_part(self.bs.exposed_comm), why,
                          f"{self._not_slower()}: compute that got shorter hides less of the "
                          "same transfers")

    # -- rank and stage checks

    def rank_bubbles(self) -> list[Check]:
        out = []
        for r in sorted(set(self.bs.rank_bubble) & set(self.ns.rank_bubble)):
            c = self._check("rank_bubble", "rank", r, self.bs.rank_bubble[r],
                            self.ns.rank_bubble[r], "abs", "fraction",
                            self.th.max_rank_bubble_increase)
            part = self._step_part(self.bs.rank_bubble[r])
            own = self._own_stages(r)
            out.append(self._rise(c, part, lambda ch, r=r, part=part: self._rank_why(r, ch, part),
                                  self._rank_cleared(r),
                                  heavier=any(st not in own for st, _ in self.heavier_stages())))
        return out

    def _own_stages(self, r: int) -> list[int]:
        return [s.stage for s in self.n.audit.stages if s.rank == r]

    def _rank_cleared(self, r: int) -> str:
        faster = self._faster_stages(self._own_stages(r))
        if faster:
            return (f"rank {r}'s own stage computes {100 * -faster[0][1]:.0f}% less and "
                    f"{self._not_slower()}: it idles longer, and waits for no one")
        return f"{self._not_slower()}: rank {r} idles longer in a step as long"

    def _rank_why(self, r: int, ch: float, part: float) -> str:
        own = self._own_stages(r)
        step = self._from_step(ch, part)
        heavy = [(s, c) for s, c in self.heavier_stages() if s not in own]
        if heavy:
            s, c = heavy[0]
            return f"rank {r} waits longer on stage {s}, whose compute grew {100 * c:+.0f}%; {step}"
        if self.uniform is not None:
            return f"{step}; {self._host_text()}"
        ex = self.ns.rank_exposed_comm.get(r), self.bs.rank_exposed_comm.get(r)
        if ex[0] is not None and ex[1] is not None:
            d = (stats.median(ex[0]) or 0.0) - (stats.median(ex[1]) or 0.0)
            if d > 0.01:
                return f"rank {r} has {100 * d:+.1f} pts more exposed communication; {step}"
        return f"{step}; no stage got heavier: rank {r} waits on communication or host overhead"

    def stage_computes(self) -> list[Check]:
        out = []
        for s in sorted(set(self.bs.stage_compute_us) & set(self.ns.stage_compute_us)):
            c = self._check("stage_compute", "stage", s, self.bs.stage_total_us(s),
                            self.ns.stage_total_us(s), "rel", "us",
                            self.th.max_stage_compute_increase)
            if c.verdict == "fail":  # "stage 1 compute per step +180% (F +175%, B +182%): ..."
                kinds = self.kind_changes(s)
                parts = ", ".join(f"{k} {100 * v:+.0f}%" for k, v in kinds.items())
                cause = self._host_text() if self.uniform is not None else \
                    f"stage {s} got heavier"
                c.explanation = (f"stage {s} compute per step {fmt_change(c.change, 'rel', 'us')}"
                                 f"{f' ({parts})' if parts else ''}: {cause} "
                                 f"({fmt_value(c.baseline, 'us')} -> {fmt_value(c.now, 'us')} "
                                 f"per step, limit {fmt_change(c.limit, 'rel', 'us')})")
            out.append(self._host(c))
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
