"""Sweep plots (matplotlib, imported lazily, Agg canvas; no pyplot global state).

* ``bubble_vs_m.png``: measured bubble vs M per schedule (solid), the closed-form
  theory (dashed) and the replay ideal (dotted), one panel per P;
* ``step_time_vs_m.png``: median step time and throughput (global batch / step) vs M;
* ``memory_vs_m.png``: peak allocated memory and peak in-flight microbatches vs M
  (measured solid, the schedule's peak dashed).

Only ``ok`` records are drawn. One series per schedule (and v when it varies).
"""

from __future__ import annotations

import importlib.util
from collections import defaultdict
from pathlib import Path

from pipeaudit.sweep.results import SweepRecord, SweepResult

PLOT_NAMES = ("bubble_vs_m.png", "step_time_vs_m.png", "memory_vs_m.png")


def matplotlib_available() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def _series(records: list[SweepRecord]) -> dict[int, dict[str, list[SweepRecord]]]:
    """P -> label -> records sorted by M."""
    multi_v = defaultdict(set)
    for r in records:
        multi_v[r.schedule].add(r.chunks)
    out: dict[int, dict[str, list[SweepRecord]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        label = r.schedule + (f" v={r.chunks}" if len(multi_v[r.schedule]) > 1 else "")
        out[r.stages][label].append(r)
    for by_label in out.values():
        for rs in by_label.values():
            rs.sort(key=lambda r: r.microbatches)
    return {p: dict(v) for p, v in sorted(out.items())}


def _figure(rows: int, cols: int):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(max(7.0, 4.8 * cols), 3.4 * rows + 1.0), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False)
    return fig, axes


def _m_axis(ax, ms: list[int]) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(ms)
    ax.set_xticklabels([str(m) for m in ms])
    ax.set_xlabel("microbatches M")
    ax.grid(True, alpha=0.3)


def _colors(labels: list[str]) -> dict[str, str]:
    cycle = ["C0", "C1", "C2", "C3", "C4", "C5", "C6", "C7", "C8", "C9"]
    return {lab: cycle[i % len(cycle)] for i, lab in enumerate(sorted(labels))}


def plot_sweep(result: SweepResult, out_dir: str | Path) -> list[Path]:
    """Write the three PNGs into ``out_dir``; return their paths ([] when nothing ran ok)."""
    ok = [r for r in result.records if r.status == "ok"]
    if not ok:
        return []
    series = _series(ok)
    ps = list(series)
    colors = _colors(sorted({lab for s in series.values() for lab in s}))
    all_ms = sorted({r.microbatches for r in ok})
    out = Path(out_dir)
    paths = []

    fig, axes = _figure(1, len(ps))
    for ax, p in zip(axes[0], ps):
        for label, rs in series[p].items():
            ms = [r.microbatches for r in rs]
            c = colors[label]
            ax.plot(ms, [r.measured_bubble for r in rs], "o-", color=c, label=f"{label} measured")
            if any(r.theory_bubble is not None for r in rs):
                ax.plot(ms, [r.theory_bubble for r in rs], "--", marker="_", markersize=12,
                        color=c, alpha=0.8, label=f"{label} theory")
            if any(r.replay_ideal is not None for r in rs):
                ax.plot(ms, [r.replay_ideal for r in rs], ":", marker="x", color=c, alpha=0.8,
                        label=f"{label} replay ideal")
        ax.set_title(f"P = {p}")
        ax.set_ylabel("bubble (fraction of step)")
        ax.set_ylim(0, 1)
        _m_axis(ax, all_ms)
    _legend(fig, axes, ncols=3)
    fig.suptitle("Pipeline bubble vs M: measured (solid), theory (dashed), replay ideal (dotted)",
                 fontsize="medium")
    paths.append(_save(fig, out / PLOT_NAMES[0]))

    fig = _two_rows(ps, series, colors, all_ms,
                    lambda r: _div(r.step_time_us, 1000), lambda r: r.throughput_samples_s,
                    ("median step time (ms)", "throughput (samples/s)"))
    fig.suptitle("Step time and throughput (global batch / step time) vs M", fontsize="medium")
    paths.append(_save(fig, out / PLOT_NAMES[1]))

    fig = _two_rows(ps, series, colors, all_ms,
                    lambda r: _div(r.peak_memory_bytes, 2**20), lambda r: r.peak_inflight,
                    ("peak allocated (MiB, max over ranks)", "peak in-flight microbatches"),
                    expected=lambda r: r.expected_peak_inflight)
    fig.suptitle("Peak memory and in-flight microbatches vs M (schedule's peak dashed)",
                 fontsize="medium")
    paths.append(_save(fig, out / PLOT_NAMES[2]))
    return paths


def _two_rows(ps, series, colors, all_ms, top, bottom, ylabels: tuple[str, str], expected=None):
    """A figure of two rows of panels (one column per P): ``top(r)`` and ``bottom(r)`` of each
    record against M, one line per schedule; ``expected(r)``, when given, dashed on the bottom
    row, whose axis then counts (integer ticks)."""
    fig, axes = _figure(2, len(ps))
    for j, p in enumerate(ps):
        for label, rs in series[p].items():
            ms = [r.microbatches for r in rs]
            c = colors[label]
            axes[0][j].plot(ms, [top(r) for r in rs], "o-", color=c, label=label)
            axes[1][j].plot(ms, [bottom(r) for r in rs], "o-", color=c, label=label)
            if expected is not None and any(expected(r) is not None for r in rs):
                axes[1][j].plot(ms, [expected(r) for r in rs], "--", color=c, alpha=0.8)
        axes[0][j].set_title(f"P = {p}")
        axes[0][j].set_ylabel(ylabels[0])
        axes[1][j].set_ylabel(ylabels[1])
        if expected is not None:
            from matplotlib.ticker import MaxNLocator

            axes[1][j].yaxis.set_major_locator(MaxNLocator(integer=True))
        for i in range(2):
            _m_axis(axes[i][j], all_ms)
    _legend(fig, axes)
    return fig


def _legend(fig, axes, ncols: int | None = None) -> None:
    """One legend for the figure, below the panels, without duplicate labels."""
    seen: dict[str, object] = {}
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    if seen:
        n = ncols or min(len(seen), 5)
        fig.legend(list(seen.values()), list(seen), loc="outside lower center", ncols=n,
                   fontsize="x-small")


def _div(x: float | int | None, d: float) -> float | None:
    return None if x is None else x / d


def _save(fig, path: Path) -> Path:
    tmp = path.with_name(f".{path.stem}.tmp{path.suffix}")
    fig.savefig(tmp, dpi=110)
    tmp.replace(path)
    return path
