"""How right is ``pipeaudit advise``? Real harness runs, predicted and rerun.

For a balanced model and one with a 3x heavier stage (P=4 by default, 8 layers,
profile_memory), one measured run of 1F1B with M=2P is advised over GPipe, 1F1B, interleaved
1F1B (v=2) and ZBV with M in P/2, P, 2P, 4P (the same global batch), and every candidate is run: an exhaustive sweep of the
candidate space, the measured configuration's rerun calibrating the machine's drift. Prints each
candidate's predicted and measured step time (error raw and calibrated) and peak memory, and
the regret: the advised configuration's measured step time against the best measured one,
from the prediction alone and after ``advise --verify auto`` (its sequence of reruns, learned
predictions and stop, replayed on each repeat's own runs and on the medians over repeats).

    python benchmarks/advise_accuracy.py --out DIR              # make the runs, then read them
    python benchmarks/advise_accuracy.py --out DIR --make-only  # the runs alone (harness, torch)
    python benchmarks/advise_accuracy.py --out DIR --read-only [--json out.json]
    python benchmarks/advise_accuracy.py --out DIR --read-only --repeats DIR2 [DIR3 ...]
    python benchmarks/advise_accuracy.py --out DIR --read-only --summarise  # measurement.json

``--summarise`` writes each rerun's measurement beside its manifest; a later read then needs the
traces of the measured runs and of the reruns of the measured configuration alone (what to
bring back from a machine where the runs were made).

A single rerun is a noisy measure on CPU (the same configuration ran 0.91x and 1.14x its first
run). ``--repeats`` reads other ``--make-only`` outputs of the same runs: each candidate's
measured step time is then the median over the repeats, and the drift the median of the
reruns of the measured configuration over the run advised from. "Per session" holds each
repeat's reruns to the predictions from the same repeat's rerun of the measured configuration,
as one ``advise --verify`` does, and takes each candidate's median error over the repeats. ``--models`` makes or reads
only some models (repeats can be made side by side on disjoint cores, e.g. under ``taskset``).

``--make-only`` needs only torch and the harness (no polars): it can run on a machine with one
core per rank, and ``--read-only`` where the analysis is installed.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from statistics import median

SCHEDULES = ["gpipe", "1f1b", "interleaved-1f1b", "zbv"]
MODELS = {"balanced": {}, "stage1x3": {1: 3}}
LAYERS = 8


def _by_config(predicted: dict) -> dict:
    """Predictions keyed (schedule, chunks, M): the benchmark keeps the run's layer split."""
    return {k[:3]: v for k, v in predicted.items()}


def microbatches(P: int) -> list[int]:
    """M from P/2 to 4P."""
    return [max(1, P // 2), P, 2 * P, 4 * P]


def grid(P: int) -> list[tuple[str, int, int]]:
    """Every (schedule, chunks, M) torch runs for the model."""
    from pipeaudit.schedules.catalogue import CATALOGUE, HARNESS, config_problem

    out = []
    for name in SCHEDULES:
        v = CATALOGUE[name].fixed_chunks or 2
        for m in microbatches(P):
            if not config_problem(name, P, m, v, HARNESS):
                out.append((name, v, m))
    return out


def make(out: Path, P: int, steps: int, hidden: int, models: list[str]) -> None:
    from pipeaudit.harness import HarnessError, ModelConfig, ProfileConfig, run_profile
    from pipeaudit.harness.manifest import read_manifest
    from pipeaudit.harness.rerun import harness_config, rerun_name

    for model, imbalance in MODELS.items():
        if model not in models:
            continue
        base = out / model / "measured"
        run_profile(ProfileConfig(
            out=str(base), schedule="1f1b", stages=P, microbatches=2 * P, steps=steps,
            model=ModelConfig(layers=LAYERS, hidden=hidden, batch_size=64), imbalance=imbalance,
            profile_memory=True, force=True, backend="gloo", device="cpu"))
        manifest = read_manifest(base)
        for name, v, m in grid(P):
            print(f"{model}: {name} v={v} M={m}", flush=True)
            try:
                run_profile(harness_config(
                    manifest, str(out / model / "reruns" / rerun_name(name, v, m)), name, v, m))
            except HarnessError as exc:  # e.g. torch 2.11's ZBV over gloo
                print(f"  failed: {str(exc).splitlines()[0][:160]}", flush=True)


MEASUREMENT = "measurement.json"


def _measurement(d: Path) -> dict:
    """What the rerun at ``d`` measured: from its traces, or from the ``--summarise`` file
    beside its manifest when the traces did not travel."""
    from pipeaudit.advise.verify import measure_run

    if (d / MEASUREMENT).exists():
        return json.loads((d / MEASUREMENT).read_text())
    return measure_run(str(d))


def summarise(out: Path, models: list[str]) -> None:
    """Write each rerun's measurement beside its manifest (read then needs the traces of the
    measured runs and of the reruns of the measured configuration alone)."""
    from pipeaudit.advise.verify import measure_run

    for model in models:
        for d in sorted((out / model / "reruns").glob("*")):
            if (d / "manifest.json").exists():
                (d / MEASUREMENT).write_text(json.dumps(measure_run(str(d))))


def replay_auto(pending: list, base_key: tuple, step_of: dict, top: int | None,
                band: float) -> tuple[list, tuple]:
    """``advise --verify``'s sequence replayed on runs already made (``step_of``: key -> step
    time µs): the reruns it makes, and the configuration it proves (no cap: the fastest of
    the measured configuration and those reruns)."""
    from pipeaudit.advise.learned import rerun_sequence

    done, _ = rerun_sequence(pending, (base_key[2], base_key[1]), step_of[base_key],
                             lambda k: {"step_time_us": step_of[k]}, top, band)
    return done, min([base_key, *(r.key for r in done)], key=lambda k: step_of[k])


def read(out: Path, repeats: list[Path], models: list[str]) -> list[dict]:
    import pipeaudit
    from pipeaudit.advise import advise
    from pipeaudit.advise.advise import order_band
    from pipeaudit.advise.learned import by_prediction
    from pipeaudit.advise.verify import median_run, predicted_again, verified_row
    from pipeaudit.harness.rerun import rerun_name

    results = []
    for model in MODELS:
        if model not in models:
            continue
        run = pipeaudit.load(out / model / "measured")
        P = run.audit().num_ranks
        a = advise(run, schedules=SCHEDULES, microbatches=microbatches(P), search_splits=False)
        by_key = {(c.schedule, c.chunks, c.microbatches): c for c in a.candidates}
        tries: dict[tuple, list[dict]] = {}
        for root in [out, *repeats]:
            for k in grid(P):
                d = root / model / "reruns" / rerun_name(*k)
                if (d / "manifest.json").exists():
                    tries.setdefault(k, []).append({**_measurement(d), "path": str(d)})
        measured = {k: median_run(v) for k, v in tries.items()}
        base_key = ("1f1b", 1, a.measured["microbatches"])
        drift = median(r["step_time_us"] for r in tries[base_key]) / a.measured["step_time_us"]
        # calibrated: predicted again from the rerun of the measured configuration (the one of
        # median step time among the repeats), as ``advise --verify`` does
        base_rerun = median_run(tries[base_key])["path"]
        again = _by_config(predicted_again(base_rerun, [by_key[k] for k in measured], None))
        rows = [verified_row(by_key[k], got, got["path"], again.get(k))
                for k, got in measured.items()]
        # per session, as one ``advise --verify`` makes them: each repeat's reruns held to the
        # predictions from the same repeat's rerun of the measured configuration
        step_of = {t["path"]: t["step_time_us"] for v in tries.values() for t in v}
        session: dict[tuple, list[float]] = {}
        again_in: dict[Path, dict] = {}  # each repeat's calibrated predictions
        for root in [out, *repeats]:
            base_dir = root / model / "reruns" / rerun_name(*base_key)
            if str(base_dir) not in step_of:
                continue
            again_here = again_in[root] = _by_config(predicted_again(
                str(base_dir), [by_key[k] for k in measured], None))
            for k in measured:
                d = str(root / model / "reruns" / rerun_name(*k))
                if d in step_of and k != base_key:
                    session.setdefault(k, []).append(step_of[d] / again_here[k] - 1.0)
        session_err = {k: median(v) for k, v in session.items()}
        learned_err: dict[tuple, list[float]] = {}
        # the advice among the configurations that ran here (torch 2.11 cannot run ZBV over gloo)
        advised = next(c for c in a.candidates
                       if (c.schedule, c.chunks, c.microbatches) in measured)
        best = min(rows, key=lambda v: v["measured_step_time_us"])
        chosen = next(v for v in rows if (v["schedule"], v["chunks"], v["microbatches"]) ==
                      (advised.schedule, advised.chunks, advised.microbatches))
        # the advice from every repeat's own measured run: how the regret moves with the
        # measurement advised from; and ``--verify auto`` as that session would make it: every
        # candidate predicted again from the session's rerun of the measured configuration,
        # rerun in the order of the learned predictions with the session's own measurements
        regret_each, proven_each, reruns_each, verified_each = [], [], [], []
        band = order_band(abs(a.calibration["error"]))
        for root in [out, *repeats]:
            if not (root / model / "measured" / "manifest.json").exists():
                continue
            other = advise(pipeaudit.load(root / model / "measured"), schedules=SCHEDULES,
                           microbatches=microbatches(P), search_splits=False)
            ran = [(c.schedule, c.chunks, c.microbatches) for c in other.candidates
                   if (c.schedule, c.chunks, c.microbatches) in measured]
            regret_each.append(measured[ran[0]]["step_time_us"] /
                               best["measured_step_time_us"] - 1.0)
            here = {k: t["step_time_us"] for k in grid(P) for t in tries.get(k, [])
                    if t["path"] == str(root / model / "reruns" / rerun_name(*k))}
            if root not in again_in:
                continue
            pending = by_prediction(again_in[root],
                                    [k for k in ran if k != base_key and k in here])
            done, proven = replay_auto(pending, base_key, here, None, band)
            proven_each.append(measured[proven]["step_time_us"] /
                               best["measured_step_time_us"] - 1.0)
            reruns_each.append(len(done))
            verified_each.append({
                rerun_name(*r.key): {"calibrated": r.measured_step_time_us / r.calibrated_us - 1,
                                     "learned": r.measured_step_time_us / r.learned_us - 1}
                for r in done})
            # every candidate in that order: each predicted before its rerun, with what the
            # reruns before it showed
            every, _ = replay_auto(pending, base_key, here, len(pending), band)
            for r in every:
                learned_err.setdefault(r.key, []).append(r.measured_step_time_us / r.learned_us - 1)
        errs = [abs(v["error"]) for v in rows if not v["is_measured_configuration"]]
        learned_med = {k: median(v) for k, v in learned_err.items()}
        # ``--verify auto --repeat R``: the same sequence on the medians over the repeats,
        # calibrated from the median rerun of the measured configuration
        medians = {k: v["step_time_us"] for k, v in measured.items()}
        done, proven = replay_auto(by_prediction(again, [k for k in measured if k != base_key]),
                                   base_key, medians, None, band)
        repeated = {"regret": measured[proven]["step_time_us"] /
                    best["measured_step_time_us"] - 1.0, "reruns": len(done)}
        verified_cal = [abs(e["calibrated"]) for d in verified_each for e in d.values()]
        verified_learned = [abs(e["learned"]) for d in verified_each for e in d.values()]
        mem = [abs(v["memory_error"]) for v in rows if v["memory_error"] is not None]
        r = {"model": model, "rows": rows, "calibration": a.calibration, "drift": drift,
             "advised": [advised.schedule, advised.chunks, advised.microbatches],
             "best_measured": [best["schedule"], best["chunks"], best["microbatches"]],
             "regret": chosen["measured_step_time_us"] / best["measured_step_time_us"] - 1.0,
             "regret_each_measured_run": regret_each,
             "regret_verified_each_measured_run": proven_each,
             "verify_auto_reruns_each_measured_run": reruns_each,
             "verify_auto_errors_each_measured_run": verified_each,
             "verify_auto_on_medians": repeated,
             "verified_max_abs_error": max(verified_cal, default=None),
             "verified_max_abs_error_learned": max(verified_learned, default=None),
             "verified_within_10pct": [sum(e <= 0.10 for e in verified_cal),
                                       sum(e <= 0.10 for e in verified_learned),
                                       len(verified_cal)],
             "median_abs_error": median(errs), "max_abs_error": max(errs),
             "session_error": {rerun_name(*k): v for k, v in session_err.items()},
             "session_median_abs_error": median(abs(v) for v in session_err.values()),
             "session_max_abs_error": max(abs(v) for v in session_err.values()),
             "learned_error": {rerun_name(*k): v for k, v in learned_med.items()},
             "learned_median_abs_error": median(abs(v) for v in learned_med.values()),
             "learned_max_abs_error": max(abs(v) for v in learned_med.values()),
             "max_abs_memory_error": max(mem) if mem else None,
             "repeats": {"_".join(map(str, k)): len(v) for k, v in tries.items()}}
        results.append(r)
        print(f"{model}:\n{'schedule':18} v  M   predicted ms  measured ms  error  calibrated  "
              "per session  learned  mem error")
        for v in sorted(rows, key=lambda v: v["predicted_step_time_us"]):
            me = "-" if v["memory_error"] is None else f"{v['memory_error']:+.1%}"
            k = (v["schedule"], v["chunks"], v["microbatches"])
            se = f"{session_err[k]:+.1%}" if k in session_err else "-"
            le = f"{learned_med[k]:+.1%}" if k in learned_med else "-"
            print(f"{v['schedule']:18} {v['chunks']}  {v['microbatches']:<3} "
                  f"{v['predicted_step_time_us'] / 1000:12.1f} {v['measured_step_time_us'] / 1000:12.1f} "
                  f"{v['error_raw']:+6.1%} {v['error']:+10.1%}  {se:>11}  {le:>7}  {me}")
        print(f"advised {r['advised']}, best measured {r['best_measured']}, regret {r['regret']:+.1%}; "
              f"|error| median {r['median_abs_error']:.1%}, max {r['max_abs_error']:.1%}; per session "
              f"median {r['session_median_abs_error']:.1%}, max {r['session_max_abs_error']:.1%}; memory "
              f"|error| max {r['max_abs_memory_error']:.1%}; drift {drift:.3f}; regret advised "
              f"from each repeat's measured run: {', '.join(f'{x:+.1%}' for x in regret_each)}; "
              f"learned median {r['learned_median_abs_error']:.1%}, max "
              f"{r['learned_max_abs_error']:.1%}; after --verify auto "
              f"({', '.join(map(str, reruns_each))} "
              f"reruns besides the measured configuration): "
              f"{', '.join(f'{x:+.1%}' for x in proven_each)}; on the repeats' medians "
              f"({repeated['reruns']} reruns): {repeated['regret']:+.1%}; the verified "
              "candidates' |error| "
              f"max {r['verified_max_abs_error']:.1%} calibrated, "
              f"{r['verified_max_abs_error_learned']:.1%} learned, within 10 %: "
              f"{r['verified_within_10pct'][0]} and {r['verified_within_10pct'][1]} of "
              f"{r['verified_within_10pct'][2]}")
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--stages", type=int, default=4, help="P (--make-only; read from the runs)")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--make-only", action="store_true")
    ap.add_argument("--read-only", action="store_true")
    ap.add_argument("--json", default=None)
    ap.add_argument("--summarise", action="store_true",
                    help=f"write each rerun's measurement ({MEASUREMENT}) beside its manifest")
    ap.add_argument("--repeats", nargs="*", default=[], help="other --make-only outputs of the same runs")
    ap.add_argument("--models", default=",".join(MODELS), help="models to make or read")
    args = ap.parse_args()
    out = Path(args.out)
    models = args.models.split(",")
    if not args.read_only:
        make(out, args.stages, args.steps, args.hidden, models)
    if args.summarise:
        summarise(out, models)
    if not args.make_only:
        results = read(out, [Path(r) for r in args.repeats], models)
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
