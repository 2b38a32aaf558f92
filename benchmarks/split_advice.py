"""Does ``pipeaudit advise``'s layer split hold when run? Real harness runs, predicted and rerun.

For one framework (torch, DeepSpeed or Megatron-core) a model with one heavy layer (its first or
its last: ``--heavy-layer K:F``) is run at the even split; advise reads that run and proposes a
split at the same schedule, v and M (predicting both); the proposal and the even split are run
``--repeats`` times each (the first even run included), their medians compared. Printed and
written to ``--out/split_advice.json``:

- predicted step time of the proposal against the median of its reruns: raw (from the run advise
  read) and calibrated (from the even run of median step time, as ``--verify --repeat`` does);
- the measured gain over the even split (medians) against the predicted gain;
- each rank's predicted peak memory of the proposal against the rerun's (median run);
- a memory cap 5 % under the even split's measured peak: advise under it, the best fitting
  candidate at the measured schedule, v and M, run, its peak;
- every contiguous split of the layers over the stages replayed (the exhaustive replay): the
  proposal's prediction over the best one's;
- with ``--sweep``: every split run ``--sweep-repeats`` times: the regret of the proposal (its
  median over the best split's median);
- with ``--confirm K``: the K fastest splits of the sweep and the proposal run
  ``--confirm-repeats`` times more, interleaved, and the regret taken again on all their runs
  (the sweep's fastest median is biased low: the least of many noisy medians).

    python benchmarks/split_advice.py --framework torch --out /tmp/sa/torch --sweep
    python benchmarks/split_advice.py --framework deepspeed --out /tmp/sa/ds
    python benchmarks/split_advice.py --framework megatron --out /tmp/sa/mcore

Runs are interleaved (even, proposal, even, proposal, ...) so that a busy machine's drift falls
on both alike.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from statistics import median

SETUPS = {  # setup -> framework, schedule, P, v, layers, heavy layer
    "torch": ("torch", "interleaved-1f1b", 2, 2, 8, {0: 6}),
    "megatron": ("megatron", "interleaved-1f1b", 2, 2, 8, {0: 6}),
    "deepspeed": ("deepspeed", "1f1b", 3, 1, 9, {8: 6}),
    # two ranks on two cores: no rank waits for a core (P = 3 above shares them)
    "deepspeed-p2": ("deepspeed", "1f1b", 2, 1, 8, {7: 6}),
    # the same heavy head on Megatron-core's 1F1B (its interleaved setup above gains 5-7 %)
    "megatron-p2": ("megatron", "1f1b", 2, 1, 8, {7: 6}),
    "torch-p2": ("torch", "1f1b", 2, 1, 8, {7: 6}),
}


def config(args, split, out: Path):
    from pipeaudit.harness import ModelConfig, ProfileConfig

    framework, sched, P, v, layers, heavy = SETUPS[args.framework]
    return ProfileConfig(
        out=str(out), schedule=sched, framework=framework, stages=P, microbatches=args.m,
        chunks=v if v > 1 else None, steps=args.steps, warmup_steps=1,
        model=ModelConfig(layers=layers, hidden=args.hidden, seq_len=args.seq_len,
                          batch_size=args.batch), heavy_layers=heavy,
        split=None if split is None else tuple(split), profile_memory=True, force=True,
        backend="gloo", device="cpu")


def run(args, split, out: Path) -> dict:
    """One run (made unless already there): step time, peak per rank."""
    import pipeaudit
    from pipeaudit.harness import run_profile

    if not (out / "manifest.json").exists():
        run_profile(config(args, split, out))
    res = pipeaudit.load(str(out)).audit()
    return {"path": str(out), "step_time_us": res.step_time_us,
            "peaks": {str(r.rank): r.peak_allocated_bytes for r in res.ranks}}


def med(runs: list[dict]) -> dict:
    return sorted(runs, key=lambda r: r["step_time_us"])[(len(runs) - 1) // 2]


def name(split) -> str:
    return "even" if split is None else "s" + "-".join(map(str, split))


def at_measured(advice) -> tuple:
    """The measured candidate and the best other split at the same schedule, v and M."""
    base = next(c for c in advice.candidates if c.measured)
    same = [c for c in advice.candidates if (c.schedule, c.chunks, c.microbatches)
            == (base.schedule, base.chunks, base.microbatches) and not c.measured]
    fitting = [c for c in same if c.fits is not False]
    if not (fitting or same):
        return base, None
    return base, min(fitting or same, key=lambda c: c.predicted_step_time_us)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--framework", choices=sorted(SETUPS), default="torch")
    ap.add_argument("--out", required=True)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--m", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--seq-len", type=int, default=16)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--sweep", action="store_true", help="run every split too")
    ap.add_argument("--sweep-repeats", type=int, default=2)
    ap.add_argument("--confirm", type=int, default=0, metavar="K",
                    help="rerun the sweep's K fastest splits and the proposal")
    ap.add_argument("--confirm-repeats", type=int, default=4)
    args = ap.parse_args()
    import pipeaudit
    from pipeaudit.advise import advise
    from pipeaudit.advise.split_search import all_splits
    from pipeaudit.explain.whatif import Changes, whatif

    out = Path(args.out)
    _, sched, P, v, layers, heavy = SETUPS[args.framework]
    evens = [run(args, None, out / f"even/r{i}") for i in range(1)]
    first = advise(pipeaudit.load(evens[0]["path"]), schedules=[sched], microbatches=[args.m])
    _, proposed = at_measured(first)
    split = proposed.stage_layers
    props = []
    for i in range(args.repeats):  # interleaved: proposal, even, proposal, ...
        props.append(run(args, split, out / f"{name(split)}/r{i}"))
        if i + 1 < args.repeats:
            evens.append(run(args, None, out / f"even/r{i + 1}"))
    even_med = med(evens)
    advice = first  # the run advise read: its proposal and its predictions
    base, cand = at_measured(advice)
    prop_med = med(props)
    pred_gain = base.predicted_step_time_us - cand.predicted_step_time_us
    meas_gain = even_med["step_time_us"] - prop_med["step_time_us"]
    result = {
        "framework": args.framework, "schedule": sched, "P": P, "v": v, "M": args.m,
        "layers": layers, "heavy_layers": heavy, "proposed": list(split),
        "even_measured_us": [r["step_time_us"] for r in evens],
        "proposed_measured_us": [r["step_time_us"] for r in props],
        "even_predicted_us": base.predicted_step_time_us,
        "proposed_predicted_us": cand.predicted_step_time_us,
        "error": prop_med["step_time_us"] / cand.predicted_step_time_us - 1.0,
        "predicted_gain_us": pred_gain, "measured_gain_us": meas_gain,
        "gain_ratio": meas_gain / pred_gain if pred_gain else None,
        "proposed_predicted_peak": cand.predicted_peak_memory_bytes,
        "proposed_measured_peaks": prop_med["peaks"],
        "even_measured_peaks": even_med["peaks"],
    }
    # calibrated, as ``advise --verify --repeat R`` predicts: from the even run of median time
    again = advise(pipeaudit.load(even_med["path"]), schedules=[sched], microbatches=[args.m],
                   search_splits=False, splits=[tuple(split)])
    cal = next(c for c in again.candidates if c.stage_layers == tuple(split))
    cal_base = next(c for c in again.candidates if c.measured)
    result["calibrated_predicted_us"] = cal.predicted_step_time_us
    result["calibrated_error"] = prop_med["step_time_us"] / cal.predicted_step_time_us - 1.0
    result["calibrated_gain_ratio"] = (meas_gain / (cal_base.predicted_step_time_us
                                                    - cal.predicted_step_time_us)
                                       if cal_base.predicted_step_time_us
                                       != cal.predicted_step_time_us else None)
    mp = max(v for v in prop_med["peaks"].values() if v)
    result["memory_error"] = mp / cand.predicted_peak_memory_bytes - 1.0
    # a cap the even split breaks
    even_peak = max(v for v in even_med["peaks"].values() if v)
    cap = int(even_peak * 0.95)  # 5 % under the even split's measured peak
    capped = advise(pipeaudit.load(evens[0]["path"]), schedules=[sched], microbatches=[args.m],
                    memory_cap=cap)
    cbase, cfit = at_measured(capped)
    if cfit is None or cfit.fits is False:
        result["cap"] = {"cap": cap, "fitting_split": None}
        (out / "split_advice.json").write_text(json.dumps(result, indent=1))
        print(json.dumps(result, indent=1))
        return
    result["cap"] = {"cap": cap, "even_predicted_peak": cbase.predicted_peak_memory_bytes,
                     "even_fits_predicted": cbase.fits, "proposed": list(cfit.stage_layers),
                     "proposed_predicted_peak": cfit.predicted_peak_memory_bytes,
                     "proposed_fits_predicted": cfit.fits}
    got = (prop_med if tuple(cfit.stage_layers) == tuple(split)
           else run(args, cfit.stage_layers, out / f"{name(cfit.stage_layers)}/cap"))
    result["cap"]["measured_peak"] = max(v for v in got["peaks"].values() if v)
    result["cap"]["fits_measured"] = result["cap"]["measured_peak"] <= cap
    splits = all_splits(layers, P * v)
    res = pipeaudit.load(evens[0]["path"])
    predicted = {s: whatif(res.timeline, Changes(schedule=sched, chunks=v, microbatches=args.m,
                                                 stage_layers=s),
                           res.audit()).predicted_step_time_us for s in splits}
    best_pred = min(predicted, key=predicted.get)
    result["exhaustive_replay"] = {
        "splits": len(splits), "best_predicted": list(best_pred),
        "proposed_over_best_predicted": predicted[tuple(split)] / predicted[best_pred] - 1.0}
    if args.sweep:
        measured = {}
        for r in range(args.sweep_repeats):
            for s in splits:
                measured.setdefault(s, []).append(
                    run(args, s, out / f"sweep/{name(s)}/r{r}")["step_time_us"])
        meds = {s: median(t) for s, t in measured.items()}
        best = min(meds, key=meds.get)
        result["sweep"] = {
            "splits": len(splits), "best_measured": list(best),
            "best_measured_us": meds[best], "proposed_sweep_us": meds[tuple(split)],
            "regret": meds[tuple(split)] / meds[best] - 1.0,
            "even_sweep_us": meds[tuple(even_split(layers, P * v))],
            "table": [{"split": list(s), "predicted_us": predicted[s], "measured_us": measured[s]}
                      for s in splits]}
        if args.confirm:
            result["sweep"]["confirm"] = confirm(args, out, measured, tuple(split))
    (out / "split_advice.json").write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "sweep"}, indent=1))
    if "sweep" in result:
        print(json.dumps({k: v for k, v in result["sweep"].items() if k != "table"}, indent=1))


def confirm(args, out: Path, measured: dict, proposed: tuple) -> dict:
    """The sweep's K fastest splits and the proposal, each run ``--confirm-repeats`` times more
    (interleaved, round by round); the regret on the medians of all their runs."""
    leaders = sorted(measured, key=lambda s: median(measured[s]))[:args.confirm]
    pool = list(dict.fromkeys([*leaders, proposed]))
    runs = {s: list(measured[s]) for s in pool}
    for r in range(args.confirm_repeats):
        for s in pool:
            runs[s].append(run(args, s, out / f"confirm/{name(s)}/r{r}")["step_time_us"])
    meds = {s: median(t) for s, t in runs.items()}
    best = min(meds, key=meds.get)
    return {"splits": [list(s) for s in pool], "best_measured": list(best),
            "best_measured_us": meds[best], "proposed_us": meds[proposed],
            "regret": meds[proposed] / meds[best] - 1.0,
            "runs_us": {name(s): t for s, t in runs.items()}}


def even_split(layers: int, stages: int) -> list[int]:
    from pipeaudit.explain.layers import even_layers

    return even_layers(layers, stages)


if __name__ == "__main__":
    main()
