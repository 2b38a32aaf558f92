"""Does the timed link predict the cross-rank delays at another microbatch count?

GPipe and 1F1B runs of the harness (P ranks, global batch 64, M from P/2 to 4P, each with the
link timed before its steps: manifest ``p2p_link``). Every run predicts the delays of the
same schedule's runs at the other M, per type (activation, gradient), two ways: kept as
measured, and moved by the message's change over the fitted bandwidth (what ``whatif`` and
``advise`` do). Prints the fitted links and the median and mean |error| of both, in us.

    python benchmarks/p2p_link.py --out DIR                # make the runs, then read them
    python benchmarks/p2p_link.py --out DIR --read-only    # read runs made before
"""

from __future__ import annotations

import argparse
from pathlib import Path
from statistics import mean, median

SCHEDULES = ("gpipe", "1f1b")


def make(out: Path, P: int, steps: int) -> None:
    from pipeaudit.harness import ModelConfig, ProfileConfig, run_profile

    for name in SCHEDULES:
        for m in sorted({max(1, P // 2), P, 2 * P, 4 * P}):
            if name == "1f1b" and m < P:
                continue  # torch's Schedule1F1B needs M >= P
            print(f"{name} M={m}", flush=True)
            run_profile(ProfileConfig(
                out=str(out / f"{name}_m{m}"), schedule=name, stages=P, microbatches=m,
                steps=steps, model=ModelConfig(batch_size=64), force=True, backend="gloo",
                device="cpu"))


def read(out: Path) -> None:
    from pipeaudit.api import load
    from pipeaudit.explain.explain import prepared_graphs
    from pipeaudit.explain.link import activation_bytes, scaling_link

    runs = {}
    for d in sorted(p for p in out.iterdir() if (p / "manifest.json").exists()):
        run = load(d)
        _, cal, _ = prepared_graphs(run.timeline)
        runs[d.name] = (run.timeline.manifest, cal)
    kept, moved = [], []
    for src, (man, cal) in runs.items():
        link, what = scaling_link(man)
        print(f"{src}: {what}")
        if link is None:
            continue
        for dst, (man2, cal2) in runs.items():
            if dst == src or man2["schedule"] != man["schedule"]:
                continue
            delta = link.delay_change_ns(activation_bytes(man, man["num_microbatches"]),
                                         activation_bytes(man, man2["num_microbatches"]))
            for t in ("activation", "gradient"):
                kept.append(abs(cal.comm[t] - cal2.comm[t]) / 1e3)
                moved.append(abs(max(0.0, cal.comm[t] + delta) - cal2.comm[t]) / 1e3)
    if kept:
        print(f"{len(kept)} delay predictions, |error| median / mean: kept as measured "
              f"{median(kept):.0f} / {mean(kept):.0f} us, moved by the link "
              f"{median(moved):.0f} / {mean(moved):.0f} us")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--stages", type=int, default=2)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--read-only", action="store_true")
    args = ap.parse_args()
    out = Path(args.out)
    if not args.read_only:
        make(out, args.stages, args.steps)
    read(out)


if __name__ == "__main__":
    main()
