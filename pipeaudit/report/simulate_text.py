"""Plain-text reports of ``pipeaudit simulate``: timelines, the reports' one table style, no colour;
every line within :data:`~pipeaudit.report.fit.WIDTH` columns."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table

from pipeaudit.report.ascii_timeline import Item, action_label, render_cells
from pipeaudit.report.fit import fit, render, table
from pipeaudit.report.published_text import NO_PUBLISHED, published_lines, published_value
from pipeaudit.schedules.catalogue import DESCRIPTIONS
from pipeaudit.schedules.replay import ReplayResult
from pipeaudit.schedules.simulation import Simulation, SweepRow


def render_timeline(result: ReplayResult, placement: tuple[int, ...], max_cells: int = 160) -> str:
    """A replay on time cells, in the timeline notation shared with ``analyze``."""
    multi = len(placement) > result.num_ranks
    t0 = result.window_start
    items = [Item(a.rank, a.start - t0, a.end - t0,
                  action_label(a.action.kind, a.action.microbatch, a.action.stage if multi else None))
             for a in result.actions]
    return render_cells(items, result.num_ranks, max_cells=max_cells, multi_stage=multi)


def _published(th) -> dict | None:
    return (th.published.to_dict("time units") if th is not None and th.published is not None
            else None)


def _formula(th) -> str:
    if th is None:
        return "no catalogue match: no closed form"
    return th.formula if th.bubble is not None else "no closed form for these inputs (see notes)"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.2f}%"


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.6g}"


def _render(*tables: Table) -> str:
    """Tables in the reports' one style, a blank line between them."""
    return render(*tables)


def _table(title: str, *columns: tuple[str, str]) -> Table:
    t = table(title=title)
    for name, justify in columns:
        t.add_column(name, justify=justify, overflow="fold")  # type: ignore[arg-type]
    return t


def header(sim: Simulation) -> str:
    """Two lines: what was simulated and with which per-stage durations."""
    s = sim.schedule
    desc = DESCRIPTIONS.get(s.name, "user schedule")
    if sim.matches and s.name not in DESCRIPTIONS:
        desc += f" (same order as catalogue {', '.join(sim.matches)})"
    durs = f"F={sim.chunk_t_f:g} "
    if s.split_backward:
        durs += (f"B={sim.chunk_t_b:g} (I={sim.chunk_t_b - sim.chunk_t_w:g} + "
                 f"W={sim.chunk_t_w:g})")
    else:
        durs += f"B={sim.chunk_t_b:g}"
    return (
        f"schedule {s.name}: {desc}\n"
        f"P={s.num_ranks} ranks, M={s.num_microbatches} microbatches, v={s.chunks} "
        f"stage{'s' if s.chunks > 1 else ''} per rank ({s.num_stages} stages); per-stage "
        f"durations {durs}; comm latency {sim.durations.comm:g}"
    )


def render_simulation(sim: Simulation, max_cells: int = 160) -> str:
    """Header, timeline, bubble per rank vs theory, peak in-flight per stage vs theory."""
    s, r, th = sim.schedule, sim.result, sim.theory
    parts = [header(sim), "", render_timeline(r, s.placement, max_cells), ""]
    ranks = _table("Bubble per rank (idle share of the step window)",
                   ("rank", "right"), ("busy", "right"), ("bubble", "right"))
    for i in range(s.num_ranks):
        ranks.add_row(str(i), _num(r.rank_busy[i]), _pct(r.rank_bubble[i]))
    overall = _table("Bubble overall (theory = the per-step closed form)", ("", "left"),
                     ("simulated", "right"), ("theory", "right"), ("formula", "left"),
                     ("published", "right"))
    overall.add_row("fraction of step", _pct(r.bubble), _pct(th.bubble if th else None),
                    _formula(th), published_value(_published(th), 2))
    sim_ratio = r.bubble / (1 - r.bubble) if r.bubble < 1 else None
    pub = _published(th)
    overall.add_row("bubble/compute ratio", _num(sim_ratio), _num(th.ratio if th else None),
                    (th.ratio_formula or "-") if th else "-",
                    _num(pub.get("ratio")) if pub else "-")
    overall.add_row("makespan", _num(r.makespan), _num(th.busy + th.bubble_time)
                    if th and th.bubble_time is not None and sim.durations.comm == 0 else "-", "",
                    "")
    peaks = _table("Peak in-flight microbatches per stage (F done - B/I done)",
                   ("stage", "right"), ("rank", "right"), ("simulated", "right"),
                   (f"theory {th.peak_formula}" if th else "theory", "right"))
    for st in range(s.num_stages):
        peaks.add_row(str(st), str(s.placement[st]), str(r.peak_inflight[st]),
                      str(th.peak_inflight.get(st)) if th else "-")
    parts.append(_render(ranks, overall, peaks))
    if th:
        parts.append(f"theory notes: {th.notes}")
        parts += published_lines(pub, 2) or [NO_PUBLISHED]
    if sim.durations.comm:
        parts.append("note: the closed forms assume zero communication; the simulation adds "
                     f"{sim.durations.comm:g} per cross-rank dependency")
    return fit("\n".join(parts))


def render_compare(items: Sequence[Simulation | tuple[str, str]], max_cells: int = 160) -> str:
    """A side-by-side table, then each schedule's timeline. Items that could not run are
    ``(name, reason)`` and appear as skipped rows."""
    t = _table("Schedules compared (peak in-flight: the most loaded stage's)",
               ("schedule", "left"), ("v", "right"), ("makespan", "right"),
               ("bubble sim", "right"), ("bubble theory", "right"), ("formula", "left"),
               ("published", "right"), ("peak in-flight", "right"), ("theory", "right"))
    for item in items:
        if isinstance(item, tuple):
            t.add_row(item[0], "-", "-", "-", "-", f"skipped: {item[1]}", "-", "-", "-")
            continue
        th = item.theory
        t.add_row(item.schedule.name, str(item.schedule.chunks), _num(item.result.makespan),
                  _pct(item.result.bubble), _pct(th.bubble if th else None),
                  _formula(th), published_value(_published(th), 2),
                  str(max(item.result.peak_inflight.values())),
                  str(max(th.peak_inflight.values())) if th else "-")
    parts = [_render(t), _published_note([i for i in items if not isinstance(i, tuple)])]
    for item in items:
        if isinstance(item, tuple):
            continue
        parts += ["", header(item), render_timeline(item.result, item.schedule.placement, max_cells)]
    return fit("\n".join(parts))


def render_sweep(rows: Sequence[SweepRow], num_ranks: int) -> str:  # noqa: D401
    """Bubble (simulated and theory) and peak in-flight against M."""
    t = _table(f"Sweep over microbatches (P={num_ranks})", ("schedule", "left"), ("M", "right"),
               ("bubble sim", "right"), ("bubble theory", "right"), ("formula", "left"),
               ("published", "right"), ("peak in-flight sim", "right"), ("theory", "right"),
               ("makespan", "right"))
    for row in rows:
        if row.simulation is None:
            t.add_row(row.schedule, str(row.num_microbatches), "-", "-",
                      f"skipped: {row.skipped}", "-", "-", "-", "-")
            continue
        sim = row.simulation
        th = sim.theory
        t.add_row(row.schedule, str(row.num_microbatches), _pct(sim.result.bubble),
                  _pct(th.bubble if th else None), _formula(th), published_value(_published(th), 2),
                  str(max(sim.result.peak_inflight.values())),
                  str(max(th.peak_inflight.values())) if th else "-", _num(sim.result.makespan))
    sims = [row.simulation for row in rows if row.simulation is not None]
    return fit("\n".join([_render(t), _published_note(sims)]))


def _published_note(sims: Sequence[Simulation]) -> str:
    """Under a table: what 'theory' and 'published' are, and each schedule's source."""
    seen: dict[str, str] = {}
    for sim in sims:
        pub = _published(sim.theory)
        if pub and sim.schedule.name not in seen:
            seen[sim.schedule.name] = f"{sim.schedule.name}: {pub['formula']} ({pub['source']})"
    text = ("bubble columns are fractions of the step; theory = the per-step closed form, "
            "published = the source's formula at the same durations")
    return "\n".join([text] + [f"  {line}" for line in seen.values()])


def render_block(info: dict) -> str:
    """What the building block gave: interval, layout before squeezing, memory it fixes."""
    peaks = info["lifespan_rank_peak"]
    order = info["rank_peak"]
    lines = [
        f"building block {info['name']}: {len(info['passes'])} passes, "
        f"{info['microbatches_per_block']} microbatch(es) per block, repeated every "
        f"{info['interval']:g} (block durations "
        + ", ".join(f"{k}={v:g}" for k, v in info["durations"].items()) + ")"
        + ("; warm-up and cool-down reordered" if info["reordered"] else ""),
        f"  laid out before squeezing: {info['layout_makespan']:g} block time units; the "
        "timeline above is the squeezed order (each pass as soon as its inputs are there)",
        "  peak activation per rank, in microbatches of the rank's share of the model: "
        + ", ".join(f"rank {r} {order[r]:g}" for r in sorted(order))
        + " (from the order); the block's lifespans give "
        + ", ".join(f"{peaks[r]:g}" for r in sorted(peaks)) + " in the steady state",
    ]
    return fit("\n".join(lines))


def render_simulation_text(sim: Simulation, *, max_cells: int = 160, info: dict | None = None) -> str:
    """One simulation, and its building block when it was built from one."""
    text = render_simulation(sim, max_cells)
    return text + "\n" + render_block(info) + "\n" if info is not None else text + "\n"
