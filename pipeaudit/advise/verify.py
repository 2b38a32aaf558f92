"""Prove an advice by real reruns: the measured configuration and the top candidates, run by the
harness with the same model, global batch, imbalance and steps, audited like the original.

The rerun of the measured configuration calibrates the machine's drift since the original run.
The machine does not drift as one number: on the bundled CPU runs a rerun's compute was 10 %
faster than the original's while its step was 2.5 % faster (transfers and host gaps moved
less). So every candidate is predicted again, by the same model, from the rerun of the
measured configuration (the same configuration, made on the machine as it is now), and its
error is given raw (measured / predicted from the original - 1) and calibrated (measured /
predicted from the rerun - 1). ``drift`` (the rerun's step time over the original's) is
reported beside. For runs that the harness did not make, :func:`how_to_run` says the exact
change to make instead, and :func:`check` holds a hand-made rerun to the advice's prediction.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from pipeaudit.advise.advise import TYPICAL_ERROR, Advice, Candidate, order_band
from pipeaudit.advise.learned import by_prediction, learning_notes, rerun_sequence
from pipeaudit.schedules.split_terms import split_lines
from pipeaudit.errors import ConfigError
from pipeaudit.harness.rerun import harness_config, rerun_name
from pipeaudit.schedules.catalogue import CATALOGUE


def measure_run(path: str) -> dict:
    """What a rerun measured: step time, bubble, peak memory (largest rank), schedule."""
    import pipeaudit

    return _measured(pipeaudit.load(path).audit())


def _measured(res) -> dict:
    peaks = [r.peak_allocated_bytes for r in res.ranks if r.peak_allocated_bytes]
    return {"step_time_us": res.step_time_us, "bubble": res.bubble.measured,
            "peak_memory_bytes": max(peaks) if peaks else None, "schedule": res.schedule}


def verify(advice: Advice, manifest: dict, out_dir: str, top: int | None,
           on_start: Callable[[str], None] | None = None, repeats: int = 1) -> Advice:
    """Rerun the measured configuration, then candidates that fit, into ``out_dir`` (one folder
    each; ``repeats`` > 1: that many runs of each, ``NAME/rI``, the one of median step time
    standing for it, the lower middle for an even count), audit them, and fill
    ``advice.verified`` and ``advice.proven``.

    Every candidate is predicted again from the rerun of the measured configuration
    (calibrated), and the candidates are rerun best-predicted first, each prediction corrected
    by what the reruns before it showed of its action size, M and chunks per rank
    (:mod:`pipeaudit.advise.learned`).
    ``top``: that many candidates; None (``--verify auto``): until no candidate left is
    predicted within :func:`order_band` of the fastest measured."""
    from pipeaudit.harness import run_profile
    from pipeaudit.harness.launcher import HarnessError

    m = advice.measured
    base = next(c for c in advice.candidates if c.measured)
    others = {_key(c): c for c in advice.candidates if not c.measured and c.fits is not False}
    failed: list[str] = []

    def rerun(c: Candidate) -> dict | None:
        split = _named_split(c)
        name = rerun_name(c.schedule, c.chunks, c.microbatches, split)
        runs = []
        for i in range(repeats):
            label = name if repeats == 1 else f"{name}/r{i + 1}"
            cfg = harness_config(manifest, str(Path(out_dir) / label), c.schedule, c.chunks,
                                 c.microbatches, c.stage_layers if split else None)
            if on_start:
                on_start(label)
            try:
                run_profile(cfg)
            except HarnessError as exc:
                if c is base:
                    raise
                failed.append(f"{label}: the rerun failed ({str(exc).splitlines()[0][:200]})")
                return None
            runs.append({**measure_run(cfg.out), "path": cfg.out})
        got = median_run(runs)
        got["step_times_us"] = [r["step_time_us"] for r in runs]
        return got

    got0 = rerun(base)
    drift = got0["step_time_us"] / m["step_time_us"]
    again = predicted_again(got0["path"], [base, *others.values()], advice.global_batch)
    pending = by_prediction(again, others)
    band = order_band(abs(advice.calibration["error"]))
    done, sizes = rerun_sequence(pending, (m["microbatches"], m["chunks"]), got0["step_time_us"],
                                 lambda k: rerun(others[k]), top, band)
    advice.verified = [verified_row(base, got0, got0.pop("path"), again.get(_key(base)))]
    for r in done:
        row = verified_row(others[r.key], r.result, r.result.pop("path"), r.calibrated_us)
        row["learned_predicted_step_time_us"] = r.learned_us
        row["error_learned"] = r.measured_step_time_us / r.learned_us - 1.0
        advice.verified.append(row)
    advice.proven = proven_best(advice.verified, advice.memory_cap_bytes)
    advice.notes.extend(failed)
    advice.notes.extend(rerun_notes(advice))
    advice.notes.append(f"machine drift since the run: the measured configuration's rerun took "
                        f"{drift:.3f}x its original step time; calibrated errors hold each "
                        "rerun to the prediction made from that rerun")
    unsteady = unsteady_note(drift, repeats)
    if unsteady:
        advice.notes.append(unsteady)
    fastest = min([got0["step_time_us"], *(r.measured_step_time_us for r in done)])
    advice.notes.extend(learning_notes(done, sizes, pending, fastest, band, auto=top is None))
    if repeats > 1:
        spread = max(max(r["measured_step_times_us"]) / min(r["measured_step_times_us"])
                     for r in advice.verified)
        advice.notes.append(f"each configuration ran {repeats} times, the run of median step "
                            f"time standing for it; the widest spread between one "
                            f"configuration's runs was {spread:.2f}x")
    return advice


def unsteady_note(drift: float, repeats: int) -> str | None:
    """A warning when one run per configuration cannot order the candidates: the same
    configuration, run twice (the original and its rerun), differed by more than the model's
    typical error (``drift``: rerun over original step time), and each ran once."""
    if repeats > 1 or abs(drift - 1.0) <= TYPICAL_ERROR:
        return None
    return (f"the same configuration ran {drift:.2f}x its first step time when run again, more "
            f"than the model's typical error ({TYPICAL_ERROR:.1%}): one run of each "
            "configuration may order candidates by the machine's noise; `--repeat 3` runs each "
            "three times and keeps the median")


def median_run(runs: list[dict]) -> dict:
    """The run of median step time among ``runs`` (the lower middle for an even count), with
    its memory and bubble."""
    ordered = sorted(runs, key=lambda r: r["step_time_us"])
    return dict(ordered[(len(ordered) - 1) // 2])


def _key(c: Candidate) -> tuple:
    return c.key


def _named_split(c: Candidate) -> tuple[int, ...] | None:
    """The candidate's split when it is not the harness's even one (None: even or unknown)."""
    from pipeaudit.explain.layers import even_layers

    if c.stage_layers is None:
        return None
    even = tuple(even_layers(sum(c.stage_layers), len(c.stage_layers)))
    return None if tuple(c.stage_layers) == even else tuple(c.stage_layers)


def predicted_again(base_rerun: str, chosen: list[Candidate],
                    global_batch: int | None) -> dict[tuple[str, int, int], float]:
    """Step time (µs) of each of ``chosen`` predicted from the rerun of the measured
    configuration at ``base_rerun``: the calibrated predictions."""
    import pipeaudit
    from pipeaudit.advise.advise import advise

    again = advise(pipeaudit.load(base_rerun), schedules=sorted({c.schedule for c in chosen}),
                   microbatches=sorted({c.microbatches for c in chosen}),
                   global_batch=global_batch, search_splits=False,
                   splits=sorted({c.stage_layers for c in chosen if c.stage_layers}))
    return {_key(c): c.predicted_step_time_us for c in again.candidates}


def verified_row(c: Candidate, got: dict, path: str, calibrated_us: float | None) -> dict:
    """One verified candidate; ``calibrated_us``: its step time predicted from the rerun of the
    measured configuration (None: not calibrated, ``error`` is then the raw error)."""
    pred = c.predicted_step_time_us
    meas = got["step_time_us"]
    pm, mm = c.predicted_peak_memory_bytes, got["peak_memory_bytes"]
    cal = pred if calibrated_us is None else calibrated_us
    return {"schedule": c.schedule, "chunks": c.chunks, "microbatches": c.microbatches,
            "stage_layers": None if c.stage_layers is None else list(c.stage_layers),
            "is_measured_configuration": c.measured, "fits_predicted": c.fits is not False,
            "predicted_step_time_us": pred, "measured_step_time_us": meas,
            "measured_step_times_us": got.get("step_times_us", [meas]),
            "calibrated_predicted_step_time_us": cal,
            "predicted_bubble": c.predicted_bubble, "measured_bubble": got["bubble"],
            "predicted_peak_memory_bytes": pm, "measured_peak_memory_bytes": mm,
            "error_raw": meas / pred - 1.0, "error": meas / cal - 1.0,
            "memory_error": (mm / pm - 1.0) if pm and mm else None, "trace": path}


def _fits_measured(row: dict, cap: int | None) -> bool:
    """Whether a rerun fits ``cap`` by its measured peak (by its prediction when the rerun
    recorded no memory)."""
    if cap is None:
        return True
    peak = row["measured_peak_memory_bytes"] or row["predicted_peak_memory_bytes"]
    return peak is None or peak <= cap


def proven_best(rows: list[dict], cap: int | None) -> dict | None:
    """The advice proven by reruns: of the verified ``rows`` that fit ``cap`` when run, the one
    measured fastest, with its speed-up over the rerun of the measured configuration (None: no
    rerun fits)."""
    fitting = [r for r in rows if _fits_measured(r, cap)]
    if not fitting:
        return None
    best = min(fitting, key=lambda r: r["measured_step_time_us"])
    base = next((r for r in rows if r["is_measured_configuration"]), None)
    return {"schedule": best["schedule"], "chunks": best["chunks"],
            "microbatches": best["microbatches"], "stage_layers": best.get("stage_layers"),
            "is_measured_configuration": best["is_measured_configuration"],
            "measured_step_time_us": best["measured_step_time_us"],
            "measured_peak_memory_bytes": best["measured_peak_memory_bytes"],
            "speedup": (base["measured_step_time_us"] / best["measured_step_time_us"]
                        if base else None),
            "reruns": len(rows)}


def rerun_notes(advice: Advice) -> list[str]:
    """What the reruns changed: a predicted fit that did not fit when run, and a proven best
    other than the predicted one."""
    out = []
    cap = advice.memory_cap_bytes
    for r in advice.verified:
        if r["fits_predicted"] and not _fits_measured(r, cap):
            out.append(f"{_name(r)} was predicted to fit the cap but its rerun peaked at "
                       f"{r['measured_peak_memory_bytes'] / 2**20:.1f} MiB, over it")
    p, first = advice.proven, advice.best
    if p is not None and first is not None and _key(first) != _row_key(p):
        row = next((r for r in advice.verified if _key(first) == _row_key(r)), None)
        ran = (f" ran {row['measured_step_time_us'] / 1000:.1f} ms" if row is not None else
               " was not rerun")
        out.append(f"the reruns reorder the advice: {_name(p)} measured fastest "
                   f"({p['measured_step_time_us'] / 1000:.1f} ms); the predicted best, "
                   f"{_name(first.to_dict())},{ran}")
    return out


def _row_key(row: dict) -> tuple:
    split = row.get("stage_layers")
    return (row["schedule"], row["chunks"], row["microbatches"],
            None if split is None else tuple(split))


def _name(row: dict) -> str:
    split = row.get("stage_layers")
    return (f"{row['schedule']} v={row['chunks']} M={row['microbatches']}"
            + ("" if split is None else f" layers {','.join(map(str, split))}"))


def how_to_run(c: Candidate) -> list[str]:
    """The exact change that runs candidate ``c`` in the frameworks users have."""
    d = CATALOGUE[c.schedule]
    out = []
    if d.torch_class:
        extra = "" if c.chunks == 1 else f" (each rank builds {c.chunks} PipelineStage objects)"
        out.append(f"torch.distributed.pipelining: {d.torch_class}(stages, "
                   f"n_microbatches={c.microbatches}, loss_fn=...){extra}")
        out.append(f"torchtitan: [parallelism] pipeline_parallel_schedule = \"{d.torch_class[len('Schedule'):]}\""
                   f", pipeline_parallel_microbatch_size = local_batch_size / {c.microbatches}")
    if c.schedule == "1f1b" and c.chunks == 1:
        out.append(f"DeepSpeed: \"gradient_accumulation_steps\": {c.microbatches} (its "
                   "TrainSchedule is 1F1B)")
        out.append(f"Megatron-core: num_microbatches={c.microbatches}, no virtual stages")
    if c.schedule == "interleaved-1f1b":
        out.append(f"Megatron-core: num_microbatches={c.microbatches}, "
                   f"virtual_pipeline_model_parallel_size={c.chunks}")
    split = _named_split(c)
    if split is not None:
        out += split_lines(split, len(split) // max(1, c.chunks))
    return out


def split_advice_lines(advice: Advice) -> list[str]:
    """When the advised candidate keeps its split: the best other split at the measured
    schedule, v and M, if predicted faster than the run, in each framework's terms."""
    best = advice.best
    if best is None or _named_split(best) is not None or advice.stage_layers is None:
        return []
    base = next((c for c in advice.candidates if c.measured), None)
    same = [c for c in advice.candidates if base is not None and not c.measured
            and (c.schedule, c.chunks, c.microbatches)
            == (base.schedule, base.chunks, base.microbatches) and c.fits is not False]
    if not same:
        return []
    c = min(same, key=lambda c: c.predicted_step_time_us)
    if c.predicted_step_time_us >= base.predicted_step_time_us or c.stage_layers is None:
        return []
    gain = 1.0 - c.predicted_step_time_us / base.predicted_step_time_us
    return ([f"at the run's schedule, v and M, the layers cut as {','.join(map(str, c.stage_layers))} "
             f"are predicted {gain:.1%} faster ({c.predicted_step_time_us / 1000:.1f} ms):"]
            + [f"  {line}" for line in split_lines(c.stage_layers,
                                                   len(c.stage_layers) // max(1, c.chunks))])


def check(advice_before: Advice, after) -> dict:
    """Hold a rerun (``after``: a loaded run) to the prediction ``advice_before`` made for its
    configuration."""
    res = after.audit()
    P = res.num_ranks
    key = (res.schedule, max(1, res.num_stages // P), res.num_microbatches)
    from pipeaudit.explain.layers import manifest_layers

    same = [c for c in advice_before.candidates if (c.schedule, c.chunks, c.microbatches) == key]
    layers = manifest_layers(after.timeline.manifest, res.num_stages)
    split = tuple(layers) if layers else None
    cand = next((c for c in same if c.stage_layers == split), same[0] if same else None)
    if cand is None:
        raise ConfigError(f"the second run ({key[0]}, v={key[1]}, M={key[2]}) is not among the "
                          "candidates predicted from the first")
    row = verified_row(cand, _measured(res), ",".join(after.timeline.inputs[:1]), None)
    row.pop("error")
    row.pop("calibrated_predicted_step_time_us")
    return row
