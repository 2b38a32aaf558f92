"""Closed-form bubble and activation memory of the catalogue schedules, and their published
figures.

:func:`theory` looks the schedule up in the catalogue and evaluates its closed form (one
function per schedule in :mod:`pipeaudit.schedules.closed_forms`) and its source's published
formula (:mod:`pipeaudit.schedules.published`) at the same durations.

Durations are per stage (per chunk when a rank holds v stages). ``T_B`` is a full backward;
schedules that split it run ``I`` (input gradient, the ZB paper's "B") for ``T_I = T_B - T_W``
and ``W`` (weight gradient) for ``T_W``.
"""

from __future__ import annotations

from dataclasses import replace

from pipeaudit.errors import ScheduleError
from pipeaudit.schedules.catalogue import CATALOGUE, build_schedule, canonical_name, check_config
from pipeaudit.schedules.closed_forms import Inputs, Theory
from pipeaudit.schedules.replay import peak_inflight_of_orders

__all__ = ["Theory", "theory"]


def theory(
    name: str,
    num_ranks: int,
    num_microbatches: int,
    chunks: int = 1,
    t_f: float = 1.0,
    t_b: float = 2.0,
    t_w: float | None = None,
    t_i: float | None = None,
) -> Theory:
    """Closed-form bubble and peak activation memory of schedule ``name``, with the published
    figure of its source in ``Theory.published`` (None when the sources state none).

    ``t_f``/``t_b`` are per-stage (per-chunk) forward and full-backward times; ``t_w`` is the
    weight-gradient part for split-backward schedules (default ``t_b / 2``). Measured split
    passes can be given as ``t_i`` and ``t_w`` instead: then ``t_b`` is ignored and taken as
    ``t_i + t_w``. For a schedule with a fixed number of stages per rank (zbv and dualpipev: 2),
    ``chunks`` 1 means that number.
    """
    if t_i is not None:
        if t_w is None:
            raise ScheduleError("theory: t_i needs t_w (the full backward is t_i + t_w)")
        t_b = t_i + t_w
    canon = canonical_name(name)
    entry = CATALOGUE[canon]
    P, M = num_ranks, num_microbatches
    v = entry.fixed_chunks if entry.fixed_chunks and chunks in (1, entry.fixed_chunks) else chunks
    check_config(canon, P, M, v)
    tw = t_b / 2 if t_w is None else t_w
    if min(t_f, t_b, tw) < 0 or tw > t_b:
        raise ScheduleError(f"invalid durations t_f={t_f}, t_b={t_b}, t_w={tw} (need 0 <= t_w <= t_b)")

    def order_peaks() -> dict[int, int]:
        s = build_schedule(canon, P, M, v)
        return peak_inflight_of_orders(s.orders, s.placement)

    x = Inputs(P, M, v, float(t_f), float(t_b), float(tw), order_peaks)
    per_step = entry.theory(x)
    published = entry.published(x, per_step) if entry.published else None
    return replace(per_step, published=published)
