"""What reruns teach the prediction as ``advise --verify`` makes them: the cost of an action's
size, and which candidate to rerun next.

The model scales each action's measured duration linearly in the microbatch's rows and in the
stage's layers. Real compute is not linear (a larger microbatch often runs more efficiently per
row, an action pays a fixed overhead whatever its size, and the curve depends on the host: at
P = 4 a heavier stage ran 1F1B at M = 4 faster than at M = 8), and one run cannot show the
curve. A rerun shows it at its size: its measured step time over its calibrated prediction is
the factor a candidate whose actions have the same size takes, the same M (rows) and the same
chunks per rank v (layers; :class:`ActionSizes`, one :class:`SizeFactors` curve over M per v).
:func:`rerun_sequence` reruns the candidates in the order of those learned predictions, each
prediction made before its own rerun, and with no fixed count stops when no candidate left is
predicted within the order band of the fastest measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import median
from typing import Callable, Hashable, Iterable, Mapping, Sequence


@dataclass
class SizeFactors:
    """Measured over calibrated step time of the reruns, per microbatch count M (same global
    batch, so per microbatch size). The measured configuration's M is 1 until a rerun at it
    says otherwise (its calibrated predictions come from the rerun of that configuration)."""

    base_microbatches: int
    seen: dict[int, list[float]] = field(default_factory=dict)

    def add(self, microbatches: int, factor: float) -> None:
        """Record one rerun at ``microbatches``: its measured over calibrated step time."""
        self.seen.setdefault(microbatches, []).append(factor)

    def factor(self, microbatches: int) -> float:
        """The factor at ``microbatches``: the median of its reruns; else interpolated in
        log M between the nearest known sizes on either side; else the nearest known size's
        (no extrapolation beyond the sizes run)."""
        known = {m: median(v) for m, v in self.seen.items()}
        known.setdefault(self.base_microbatches, 1.0)
        if microbatches in known:
            return known[microbatches]
        below = [m for m in known if m < microbatches]
        above = [m for m in known if m > microbatches]
        if below and above:
            lo, hi = max(below), min(above)
            t = math.log(microbatches / lo) / math.log(hi / lo)
            return math.exp((1 - t) * math.log(known[lo]) + t * math.log(known[hi]))
        return known[max(below) if below else min(above)]


#: An action's size: (M, chunks per rank v), its rows and its layers.
Size = tuple[int, int]


@dataclass
class ActionSizes:
    """The factors learned per action size: one :class:`SizeFactors` curve over M for each
    chunk count v, each starting at 1 at the measured configuration's M; ``base``: the
    measured configuration's size (M, v), whose curve its rerun anchors."""

    base: Size
    curves: dict[int, SizeFactors] = field(default_factory=dict)

    def _curve(self, chunks: int) -> SizeFactors:
        return self.curves.setdefault(chunks, SizeFactors(self.base[0]))

    def add(self, size: Size, factor: float) -> None:
        """Record one rerun of ``size``: its measured over calibrated step time."""
        self._curve(size[1]).add(size[0], factor)

    def factor(self, size: Size) -> float:
        """The factor at ``size``: its chunk count's curve at its M. A chunk count nothing ran
        with (neither a rerun nor the measured configuration) takes the curve of the nearest
        one that ran (the fewer chunks on a tie): an action's rows cost alike whatever its
        layers until a run says otherwise."""
        m, v = size
        ran = [c for c, curve in self.curves.items() if curve.seen] + [self.base[1]]
        if v not in ran:
            v = min(ran, key=lambda c: (abs(c - v), c))
        return self.curves.get(v, SizeFactors(self.base[0])).factor(m)

    def learned(self) -> dict[Size, float]:
        """The factor of every size rerun, by (M, v)."""
        return {(m, v): c.factor(m) for v, c in sorted(self.curves.items())
                for m in sorted(c.seen)}

    def predict(self, pending: Sequence[tuple[Hashable, Size, float]]) -> dict[Hashable, float]:
        """Each of ``pending`` (key, size, calibrated step time) predicted with what was
        learned: its calibrated step time times :meth:`factor` at its size."""
        return {key: cal * self.factor(size) for key, size, cal in pending}


def by_prediction(calibrated: Mapping[tuple, float],
                  keys: Iterable[tuple]) -> list[tuple[tuple, Size, float]]:
    """``keys`` ((schedule, chunks, M[, stage_layers])) that have a calibrated prediction, as
    (key, (M, chunks), calibrated step time), best-predicted first: what
    :func:`rerun_sequence` takes."""
    return sorted(((k, (k[2], k[1]), calibrated[k]) for k in keys if k in calibrated),
                  key=lambda p: p[2])


@dataclass
class Rerun:
    """One rerun made by :func:`rerun_sequence`: what it measured and what was predicted for it
    just before it ran (calibrated, and corrected by the reruns made before it)."""

    key: Hashable
    size: Size
    measured_step_time_us: float
    calibrated_us: float
    learned_us: float
    result: dict


def rerun_sequence(pending: Sequence[tuple[Hashable, Size, float]], base: Size,
                   base_step_time_us: float, run: Callable[[Hashable], dict | None],
                   top: int | None, band: float) -> tuple[list[Rerun], ActionSizes]:
    """Rerun candidates best-predicted first, learning from each.

    ``pending``: (key, size (M, v), calibrated predicted step time µs) of the candidates that
    may be rerun; ``base``: the measured configuration's size; ``run(key)``: the rerun's
    measurement (``step_time_us`` at least) or None when it failed; ``top``: how many to try,
    or None to stop once the best-predicted candidate left is more than ``band`` slower than
    the fastest measured so far (the rerun of the measured configuration,
    ``base_step_time_us``, included; one candidate is always tried)."""
    sizes = ActionSizes(base)
    left = list(pending)
    done: list[Rerun] = []
    best = base_step_time_us
    tried = 0
    while left and (top is None or tried < top):
        learned = sizes.predict(left)
        i = min(range(len(left)), key=lambda j: learned[left[j][0]])
        key, size, cal = left[i]
        if top is None and tried and learned[key] > best * (1.0 + band):
            break
        del left[i]
        tried += 1
        got = run(key)
        if got is None:
            continue
        t = got["step_time_us"]
        done.append(Rerun(key, size, t, cal, learned[key], got))
        sizes.add(size, t / cal)
        best = min(best, t)
    return done, sizes


def learning_notes(done: list[Rerun], sizes: ActionSizes,
                   pending: Sequence[tuple[Hashable, Size, float]], fastest_us: float,
                   band: float, auto: bool) -> list[str]:
    """What the reruns taught (the factor per action size) and, for ``auto``, why they
    stopped: the closest candidate left (keys are (schedule, chunks, M[, stage_layers])) against
    the fastest
    measured."""
    out = []
    learned = sizes.learned()
    if learned:
        out.append("learned from the reruns (measured over calibrated step time, per microbatch "
                   "count M and chunks per rank v; each rerun was predicted with what the reruns "
                   "before it showed): " +
                   ", ".join(f"M={m} v={v} x{f:.3f}" for (m, v), f in learned.items()))
    if auto:
        ran = {r.key for r in done}
        left = sizes.predict([p for p in pending if p[0] not in ran])
        stop = "with none left"
        if left:
            k = min(left, key=left.__getitem__)
            name, chunks, m = k[:3]  # type: ignore[index]
            split = k[3] if len(k) > 3 and k[3] else None  # type: ignore[arg-type]
            layers = "" if split is None else " layers " + ",".join(map(str, split))
            stop = (f"with {len(left)} left, none predicted within {band:.0%} of the fastest "
                    f"measured ({fastest_us / 1000:.1f} ms; the closest, {name} v={chunks} "
                    f"M={m}{layers}, {left[k] / 1000:.1f} ms learned)")
        out.append(f"--verify auto reran {len(done)} candidate(s) in the order of their learned "
                   f"predictions and stopped {stop}")
    return out
