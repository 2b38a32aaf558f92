"""Plain-text reports of ``explain`` and ``whatif`` (terminal, logs)."""

from __future__ import annotations

from itertools import groupby

from pipeaudit.explain.critical import COMM, COMPUTE, CriticalPath, PathItem
from pipeaudit.explain.explain import Explanation
from pipeaudit.explain.whatif import Prediction
from pipeaudit.report.fit import fit, render, table
from pipeaudit.report.formatting import inputs_line, ms, pct

NEAR_CRITICAL = 0.01  # slack below this share of the step counts as near-critical


def shares_line(p: CriticalPath) -> str:
    return (f"compute {pct(p.compute_share)} + communication {pct(p.comm_share)} + host/launch "
            f"gaps {pct(p.other_share)}")


def segments(p: CriticalPath) -> list[tuple[str, list[PathItem]]]:
    """The path cut into runs on one rank ("rank") and the waits between ranks ("comm")."""
    out: list[tuple[str, list[PathItem]]] = []
    for comm, group in groupby(p.items, key=lambda i: i.what == COMM):
        if comm:
            out += [("comm", [i]) for i in group]
        else:
            out += [("rank", list(g)) for _, g in groupby(group, key=lambda i: i.rank)]
    return out


def chain_lines(p: CriticalPath, max_labels: int = 12) -> list[str]:
    """A readable chain: one line per run of actions on one rank, one per communication wait."""
    lines = []
    for kind, items in segments(p):
        if kind == "comm":
            i = items[0]
            lines.append(f"    ~ {ms(i.duration_us)} ms communication: {i.label} on rank {i.rank} "
                         f"waits for {i.after}")
            continue
        acts = [i for i in items if i.what == COMPUTE]
        gaps = sum(i.duration_us for i in items if i.what != COMPUTE)
        labels = [i.label for i in acts]
        if len(labels) > max_labels:
            labels = labels[: max_labels // 2] + ["…"] + labels[-max_labels // 2:]
        comp = sum(i.duration_us for i in acts)
        plural = "s" if len(acts) != 1 else ""
        host = f", host/launch gaps {ms(gaps)} ms" if gaps else ""
        lines.append(f"  rank {items[0].rank}  {ms(items[0].start_us):>9} - "
                     f"{ms(items[-1].end_us):>9} ms  {' '.join(labels)}  ({len(acts)} "
                     f"action{plural}: compute {ms(comp)} ms{host})")
    return lines


def slack_lines(p: CriticalPath) -> list[str]:
    on_path = {(i.rank, i.label) for i in p.items if i.what == COMPUTE}
    lines = []
    for rank, group in groupby(sorted(p.slack, key=lambda s: (s.rank, s.start_us)),
                               key=lambda s: s.rank):
        sl = list(group)
        crit = sum(1 for s in sl if (s.rank, f"{s.stage}{s.kind}{s.microbatch}") in on_path)
        vals = sorted(s.slack_us for s in sl)
        lines.append(f"  rank {rank}: {crit} of {len(sl)} actions on the critical path; slack "
                     f"min {ms(vals[0])}, median {ms(vals[len(vals) // 2])}, max {ms(vals[-1])} ms")
    near = [s for s in p.slack if (s.rank, f"{s.stage}{s.kind}{s.microbatch}") not in on_path
            and s.slack_us < NEAR_CRITICAL * p.step_time_us]
    if near:
        shown = ", ".join(f"{s.stage}{s.kind}{s.microbatch} (rank {s.rank}, {ms(s.slack_us)} ms)"
                          for s in sorted(near, key=lambda s: s.slack_us)[:8])
        lines.append(f"  near-critical (off the path, slack < {NEAR_CRITICAL:.0%} of the step): "
                     f"{shown}")
    return lines


def cause_lines(e: Explanation, top: int) -> list[str]:
    t = table("#", "stage", "kind", "gain if 10% faster", "of the step", "compute on the path",
              title="Top causes (each step replayed with one stage/kind 10% faster; mean gain "
                    "per step)")
    for col in t.columns:
        col.justify = "left" if col.header == "kind" else "right"
    for n, c in enumerate(e.top_causes[:top], 1):
        t.add_row(str(n), str(c.stage), c.kind, f"{ms(c.gain_us_if_10pct_faster)} ms",
                  pct(c.gain_share), f"{ms(c.on_path_us)} ms")
    return [render(t),
            f"all cross-rank delays 10% shorter: {ms(e.comm_gain_us)} ms; all host/launch "
            f"gaps 10% shorter: {ms(e.host_gain_us)} ms"]


def render_explain_text(e: Explanation, *, step: CriticalPath | None = None,
                        timeline_text: str = "", top: int = 5) -> str:
    """The explain report: shares, the chain, slack, top causes and the marked timeline."""
    p = step or e.median_step
    out = ["pipeaudit explain  " + inputs_line(e.inputs)]
    if p is None:
        return "\n".join(out + ["no step to explain"]) + "\n"
    out.append(f"{len(e.steps)} step(s); critical path of every step:")
    for s in e.steps:
        out.append(f"  step {s.step}: {ms(s.step_time_us)} ms = {shares_line(s)}")
    out += ["", f"Critical path of step {p.step} ({ms(p.step_time_us)} ms; ms from the step "
                "start; the action that ends last, walked back through what bound each start):"]
    out += chain_lines(p)
    out += ["", f"Slack of step {p.step} (how late an action could start without delaying the "
                "step):"]
    out += slack_lines(p)
    out += [""] + cause_lines(e, top)
    text = fit("\n".join(out))
    if timeline_text:  # drawn to --width: a picture, never wrapped
        text += "\n\n" + f"Timeline of step {p.step}\n" + timeline_text
    return "\n".join([text] + [fit(f"note: {n}") for n in e.notes]) + "\n"


def render_whatif_text(p: Prediction) -> str:
    """The whatif report: measured vs predicted step time and bubble, and the assumptions."""
    b, a = p.before, p.after
    out = ["pipeaudit whatif  " + inputs_line(p.inputs),
           f"changes: {', '.join(p.changes) or 'none'}",
           f"run:        {b.get('schedule') or 'unknown'} P={b['num_ranks']} "
           f"M={b['num_microbatches']} v={b.get('num_chunks')}",
           f"replayed:   {a.get('schedule') or 'unknown'} P={a['num_ranks']} "
           f"M={a['num_microbatches']} v={a.get('num_chunks')}  (model: {p.model})",
           ""]
    t = table("", "measured", "predicted", "change")
    for col in t.columns[1:]:
        col.justify = "right"
    t.add_row("step time", f"{ms(p.measured_step_time_us)} ms", f"{ms(p.predicted_step_time_us)} ms",
              f"{p.change:+.1%}")
    t.add_row("bubble", pct(p.measured_bubble), pct(p.predicted_bubble), "")
    out.append(render(t))
    c = p.calibration
    if c:
        out += ["", f"calibration: the same model on the unchanged order predicts "
                    f"{ms(c['unchanged_prediction_us'])} ms against {ms(c['measured_us'])} ms "
                    f"measured ({c['error']:+.1%}); the prediction carries an error of that order"]
    out += ["", "assumptions:"] + [f"  - {x}" for x in p.assumptions]
    out += [f"note: {n}" for n in p.notes]
    return fit("\n".join(out)) + "\n"
