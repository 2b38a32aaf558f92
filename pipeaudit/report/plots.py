"""Static plots for papers and tickets (matplotlib, imported lazily; the ``plot`` extra).

Each ``*_figure`` function returns a :class:`matplotlib.figure.Figure` built without pyplot (no
global backend state: safe in scripts, servers and notebooks, where ``display(fig)`` shows
it); :func:`save_plot` writes one kind of plot to a ``.png`` (Agg) or ``.svg`` file.

- ``timeline``: one step, one row per rank, a box per action from its first to its last
  compute, coloured by kind and labelled with its microbatch; under each rank, the replay
  ideal of the same step (lighter);
- ``bubble``: per rank, measured bubble, the schedule's theory and the replay ideal;
- ``memory``: ``Total Allocated`` over time per rank (needs ``profile_memory=True``);
- ``inflight``: microbatches in flight per stage over time, against the expected peak.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from pipeaudit.audit.result import AuditResult
from pipeaudit.errors import ConfigError
from pipeaudit.outfiles import atomic_path
from pipeaudit.report import palette
from pipeaudit.report.series import (
    device_label,
    ideal_actions,
    inflight_series,
    memory_series,
    run_origin,
    step_actions,
    step_windows,
)
from pipeaudit.report.step_view import median_step
from pipeaudit.timeline.model import Timeline

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

KINDS = ("timeline", "bubble", "memory", "inflight")
FORMATS = (".png", ".svg")


def _figure(width: float, height: float) -> "Figure":
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ConfigError("plots need matplotlib: pip install 'pipeaudit[plot]'") from None
    return Figure(figsize=(width, height), layout="constrained")


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def timeline_figure(tl: Timeline, result: AuditResult, *, step: int | None = None,
                    ideal: bool = True) -> "Figure":
    """The timeline of ``step`` (default: the median step), measured and replay ideal."""
    from matplotlib.patches import Patch

    windows = step_windows(tl)
    k = median_step(result) if step is None else step
    if k is None or k not in windows:
        have = ", ".join(map(str, sorted(windows))) or "none"
        raise ConfigError(f"no step {k} to plot (steps with actions: {have})")
    lo, hi = windows[k]
    acts = step_actions(tl, k)
    ideal_rows = ideal_actions(tl, k, lo) if ideal else None
    ranks = sorted({a.rank for a in acts})
    multi = {r: len({a.stage for a in acts if a.rank == r}) > 1 for r in ranks}
    ypos = {r: i for i, r in enumerate(ranks)}
    fig = _figure(12, 0.75 * len(ranks) + 1.6)
    ax = fig.add_subplot()
    tmax = (hi - lo) / 1e6
    if ideal_rows:
        tmax = max(tmax, max(a.end - lo for a in ideal_rows) / 1e6)
    ax.set_xlim(0, tmax * 1.005)
    for r in ranks:
        y = ypos[r]
        ax.broken_barh([(0, (hi - lo) / 1e6)], (y - 0.3, 0.6), facecolors=palette.BUBBLE, zorder=1)
    min_label = tmax / 60
    for a in acts:
        x0, w = (a.start - lo) / 1e6, max(a.end - a.start, 0) / 1e6
        y = ypos[a.rank]
        ax.broken_barh([(x0, w)], (y - 0.3, 0.6), facecolors=palette.KIND_COLOURS.get(a.kind, "#777"),
                       edgecolors="white", linewidth=0.4, zorder=2)
        if w >= min_label:
            label = f"{a.stage}{a.kind}{a.microbatch}" if multi[a.rank] else f"{a.kind}{a.microbatch}"
            if w < min_label * 2:
                label = str(a.microbatch)
            ax.text(x0 + w / 2, y, label, ha="center", va="center", fontsize=7, color="white", zorder=3)
    if ideal_rows:
        for a in ideal_rows:
            if a.rank not in ypos:
                continue
            ax.broken_barh([((a.start - lo) / 1e6, (a.end - a.start) / 1e6)], (ypos[a.rank] + 0.33, 0.22),
                           facecolors=palette.KIND_COLOURS.get(a.kind, "#777"), alpha=0.45, zorder=2)
        ideal_end = max(a.end - lo for a in ideal_rows) / 1e6
        ax.axvline(ideal_end, color=palette.IDEAL, linestyle="--", linewidth=1)
        ax.text(ideal_end, -0.42, "ideal ends ", color=palette.IDEAL, ha="right", va="top", fontsize=7)
    ax.axvline((hi - lo) / 1e6, color="#333", linestyle="--", linewidth=1)
    ax.text((hi - lo) / 1e6, -0.42, "step ends ", color="#333", ha="right", va="top", fontsize=7)
    ax.set_yticks([ypos[r] for r in ranks], [f"rank {r}" for r in ranks])
    ax.set_ylim(len(ranks) - 0.35, -0.5)
    ax.set_xlabel("ms from the step window's start")
    meta = next((s for s in result.steps if s.step == k), None)
    title = f"Step {k}" + (f" of {result.schedule}" if result.schedule else "")
    if meta is not None:
        title += f": window {meta.step_time_us / 1000:.1f} ms, bubble {_pct(meta.bubble)}"
        if meta.replay_ideal is not None:
            title += f" (replay ideal {_pct(meta.replay_ideal)}"
            title += f", theory {_pct(result.bubble.theory)})" if result.bubble.theory is not None else ")"
    ax.set_title(title, loc="left", fontsize=11)
    kinds = [kd for kd in palette.KIND_COLOURS if any(a.kind == kd for a in acts)]
    handles = [Patch(color=palette.KIND_COLOURS[kd], label=kd) for kd in kinds]
    handles.append(Patch(color=palette.BUBBLE, label="no action"))
    if ideal_rows:
        handles.append(Patch(color=palette.KIND_COLOURS["F"], alpha=0.45, label="replay ideal (thin row)"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    ax.spines[["top", "right"]].set_visible(False)
    return fig


def bubble_figure(result: AuditResult) -> "Figure":
    """Bubble per rank: measured, theory and replay ideal bars."""
    import numpy as np

    ranks = [r for r in result.ranks if r.bubble is not None]
    if not ranks:
        raise ConfigError("no pipeline ranks: nothing to plot for the bubble")
    fig = _figure(max(6.0, 1.3 * len(ranks) + 2.5), 3.8)
    ax = fig.add_subplot()
    x = np.arange(len(ranks))
    th = result.bubble.theory
    series = [("measured", [r.bubble for r in ranks], palette.MEASURED),
              ("theory", [th for _ in ranks], palette.THEORY),
              ("replay ideal", [r.replay_bubble for r in ranks], palette.IDEAL)]
    width = 0.26
    for i, (label, vals, colour) in enumerate(series):
        ys = [100 * v if v is not None else 0.0 for v in vals]
        bars = ax.bar(x + (i - 1) * width, ys, width * 0.95, label=label, color=colour)
        for b, v in zip(bars, vals):
            if v is not None:
                ax.text(b.get_x() + b.get_width() / 2, b.get_height() + 0.8, f"{100 * v:.0f}",
                        ha="center", va="bottom", fontsize=7)
    ax.set_xticks(x, [f"rank {r.rank}" for r in ranks])
    ax.set_ylabel("bubble (% of step)")
    formula = result.bubble.theory_formula
    title = f"Bubble per rank: measured {_pct(result.bubble.measured)}"
    if th is not None:
        title += f", theory {_pct(th)}"
    if result.bubble.replay_ideal is not None:
        title += f", replay ideal {_pct(result.bubble.replay_ideal)}"
    ax.set_title(title, loc="left", fontsize=11)
    if formula and len(formula) < 40:
        ax.text(1.0, -0.13, f"theory: {formula}", transform=ax.transAxes, ha="right", fontsize=8,
                color="#555")
    ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.spines[["top", "right"]].set_visible(False)
    return fig


def memory_figure(tl: Timeline) -> "Figure":
    """``Total Allocated`` over time per rank (and device)."""
    mem = memory_series(tl)
    if not mem:
        raise ConfigError("these traces hold no [memory] samples: profile with "
                          "profile_memory=True (pipeaudit profile --profile-memory) to plot memory")
    origin = run_origin(tl)
    fig = _figure(12, 3.8)
    ax = fig.add_subplot()
    i = 0
    for r, devs in mem.items():
        for d, (ts, vals) in devs.items():
            label = f"rank {r}" + (f" {device_label(d)}" if len(devs) > 1 else "")
            ax.plot((ts - origin) / 1e6, vals / 2**20, drawstyle="steps-post", linewidth=1.2,
                    color=palette.SERIES[i % len(palette.SERIES)],
                    label=f"{label} (peak {vals.max() / 2**20:.1f} MiB)")
            i += 1
    ax.set_xlabel("ms from the run's start")
    ax.set_ylabel("MiB allocated")
    ax.set_ylim(bottom=0)
    ax.set_title("Memory (Total Allocated) over time per rank", loc="left", fontsize=11)
    ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.spines[["top", "right"]].set_visible(False)
    return fig


def inflight_figure(tl: Timeline, result: AuditResult) -> "Figure":
    """Microbatches in flight per stage over time (one strip per stage), with the expected peak."""
    series = inflight_series(tl)
    if not series:
        raise ConfigError("no pipeline actions: nothing in flight to plot")
    origin = run_origin(tl)
    expected = {s.stage: s.expected_peak_inflight for s in result.stages}
    fig = _figure(12, 0.75 * len(series) + 1.3)
    axes = fig.subplots(len(series), 1, sharex=True, squeeze=False)[:, 0]
    top = max(max(n for _, n in rows) for rows in series.values())
    top = max([top] + [e for e in expected.values() if e is not None])
    for i, (ax, (s, rows)) in enumerate(zip(axes, series.items())):
        t = [(x - origin) / 1e6 for x, _ in rows]
        v = [n for _, n in rows]
        ax.plot(t, v, drawstyle="steps-post", color=palette.SERIES[i % len(palette.SERIES)], linewidth=1.2)
        exp = expected.get(s)
        if exp is not None:
            ax.axhline(exp, color="#555", linestyle="--", linewidth=0.8)
        ax.set_ylim(0, top + 0.6)
        ax.set_yticks([0, top])
        ax.set_ylabel(f"stage {s}", rotation=0, ha="right", va="center", fontsize=8)
        ax.text(1.005, 0.5, f"peak {max(v)}" + (f" / exp. {exp}" if exp is not None else ""),
                transform=ax.transAxes, fontsize=8, va="center")
        ax.spines[["top", "right"]].set_visible(False)
        ax.tick_params(labelsize=7)
    axes[0].set_title("Microbatches in flight per stage (dashed: the schedule's expected peak)",
                      loc="left", fontsize=11)
    axes[-1].set_xlabel("ms from the run's start")
    return fig


def make_figure(kind: str, tl: Timeline, result: AuditResult, **opts: Any) -> "Figure":
    """One plot by name (``timeline``, ``bubble``, ``memory`` or ``inflight``)."""
    if kind == "timeline":
        return timeline_figure(tl, result, **opts)
    if kind == "bubble":
        return bubble_figure(result)
    if kind == "memory":
        return memory_figure(tl)
    if kind == "inflight":
        return inflight_figure(tl, result)
    raise ConfigError(f"unknown plot kind {kind!r}; choose from {', '.join(KINDS)}")


def save_plot(kind: str, tl: Timeline, result: AuditResult, path: str, *,
              dpi: int = 150, **opts: Any) -> None:
    """Write one plot to ``path``: PNG (Agg) or SVG, chosen by the file's extension."""
    ext = os.path.splitext(path)[1].lower()
    if ext not in FORMATS:
        raise ConfigError(f"{path}: the plot format comes from the extension; use .png or .svg")
    if not result.pipeline_found and kind != "memory":
        raise ConfigError("no pipeline actions were found in these traces: only --kind memory can be plotted")
    fig = make_figure(kind, tl, result, **opts)
    import matplotlib

    with atomic_path(path, what="the plot", suffix=ext) as tmp:
        # a bare Figure saves PNG through matplotlib's Agg canvas and SVG through its SVG one;
        # SVG text stays text (searchable, smaller)
        with matplotlib.rc_context({"svg.fonttype": "none"}):
            fig.savefig(tmp, format=ext[1:], dpi=dpi)
