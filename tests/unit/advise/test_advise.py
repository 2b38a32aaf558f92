"""``pipeaudit advise``: the ranking on real runs."""

from __future__ import annotations

import json

import pytest

import pipeaudit
from pipeaudit.advise import advise
from pipeaudit.advise.verify import harness_config, how_to_run
from pipeaudit.errors import ConfigError
from tests.support.cli import invoke
from tests.support.paths import SAMPLES

MEMORY_RUN = SAMPLES / "1f1b_p2_m4_memory"


def test_ranking_and_json_on_a_run_with_memory():
    run = pipeaudit.load(MEMORY_RUN)
    a = advise(run)
    m = a.measured
    assert (m["schedule"], m["chunks"], m["microbatches"]) == ("1f1b", 1, 4)
    assert a.memory_model and m["peak_memory_bytes"] > 0
    base = next(c for c in a.candidates if c.measured)
    # the measured configuration is predicted by the same model: its calibration error
    assert base.predicted_step_time_us == pytest.approx(a.calibration["predicted_step_time_us"])
    assert abs(a.calibration["error"]) < 0.25
    times = [c.predicted_step_time_us for c in a.candidates]
    assert times == sorted(times)
    # the measured peak is reproduced by the memory model for the measured configuration
    assert base.predicted_peak_memory_bytes == pytest.approx(m["peak_memory_bytes"], rel=0.01)
    # more microbatches of the same batch hold smaller activations in 1F1B
    one = {c.microbatches: c for c in a.candidates if c.schedule == "1f1b"}
    assert one[8].predicted_peak_memory_bytes < one[4].predicted_peak_memory_bytes
    # the layers the manifest gives bound the chunks: 2 layers, P=2, so no v=2 candidate
    assert all(c.chunks == 1 for c in a.candidates)
    doc = json.loads(invoke("advise", MEMORY_RUN, "--format", "json").output)
    assert doc["tool"] == "pipeaudit advise" and doc["measured"]["microbatches"] == 4
    assert {"schedule", "chunks", "microbatches", "predicted_step_time_us", "predicted_bubble",
            "predicted_peak_memory_bytes", "fits"} <= set(doc["candidates"][0])


def test_a_cap_below_the_fastest_advises_the_fastest_that_fits():
    run = pipeaudit.load(MEMORY_RUN)
    free = advise(run)
    fastest = free.candidates[0]
    cap = fastest.predicted_peak_memory_bytes - 1
    capped = advise(run, memory_cap=cap)
    best = capped.best
    assert best.fits and best.predicted_peak_memory_bytes <= cap
    fitting = [c for c in free.candidates if c.predicted_peak_memory_bytes <= cap]
    assert (best.schedule, best.chunks, best.microbatches) == (
        fitting[0].schedule, fitting[0].chunks, fitting[0].microbatches)
    assert all(c.fits is False for c in capped.candidates if c.predicted_peak_memory_bytes > cap)


def test_without_memory_events_time_only():
    a = advise(pipeaudit.load(SAMPLES / "1f1b_p4_m8"))
    assert not a.memory_model and a.candidates[0].predicted_peak_memory_bytes is None
    assert any("no [memory] events" in n for n in a.notes)
    measured, cands = pipeaudit.load(SAMPLES / "1f1b_p4_m8").advise()
    assert measured["microbatches"][0] == 8 and cands.height == len(a.candidates)


def test_text_report_and_usage_errors():
    res = invoke("advise", MEMORY_RUN, "--memory-cap", "64MiB", "--top", "3")
    assert res.exit_code == 0, res.output
    assert "advice:" in res.output and "(stages, n_microbatches=" in res.output
    assert invoke("advise", MEMORY_RUN, "--verify", "1").exit_code == 2
    assert invoke("advise", MEMORY_RUN, "--verify", "auto").exit_code == 2  # no --out
    res = invoke("advise", MEMORY_RUN, "--verify", "some", "--out", "x")
    assert res.exit_code == 2 and "neither a count nor 'auto'" in res.output
    res = invoke("advise", MEMORY_RUN, "--repeat", "3")
    assert res.exit_code == 2 and "--repeat repeats the reruns of --verify" in res.output
    assert invoke("advise", MEMORY_RUN, "--check").exit_code == 2
    assert invoke("advise", MEMORY_RUN, "--microbatches", "0,x").exit_code == 2


def test_how_to_run_names_each_framework():
    a = advise(pipeaudit.load(MEMORY_RUN), schedules=["interleaved-1f1b"], microbatches=[4])
    c = next(c for c in a.candidates if c.schedule == "1f1b")
    lines = "\n".join(how_to_run(c))
    assert "gradient_accumulation_steps\": 4" in lines and "num_microbatches=4" in lines


def test_rerun_config_keeps_the_heavy_layers():
    man = json.loads((SAMPLES / "1f1b_p4_m8_imb_s1x3" / "manifest.json").read_text())
    cfg = harness_config({**man, "model": {**man["model"], "layers": 8},
                          "stage_layers": [2, 2, 2, 2]}, "/tmp/x", "interleaved-1f1b", 2, 8)
    # stage 1 held layers 2-3; with 8 stages of one layer they are stages 2 and 3
    assert cfg.imbalance == {2: 3, 3: 3} and cfg.batch_size == man["model"]["batch_size"]


@pytest.mark.parametrize("sample,framework,schedule,chunks", [
    ("deepspeed_p4_m8", "deepspeed", "1f1b", 1),
    ("megatron_interleaved-1f1b_p4_m8_v2", "megatron", "interleaved-1f1b", 2),
])
def test_rerun_config_keeps_the_framework(sample, framework, schedule, chunks):
    """A DeepSpeed or Megatron-core run made by the harness is rerun by the same framework
    (its manifest names it ``deepspeed`` or ``megatron-core``)."""
    man = json.loads((SAMPLES / sample / "manifest.json").read_text())
    cfg = harness_config(man, "/tmp/x", schedule, chunks, 4)
    assert (cfg.framework, cfg.schedule, cfg.microbatches) == (framework, schedule, 4)


def test_a_run_of_an_unknown_framework_is_not_rerun():
    man = json.loads((SAMPLES / "deepspeed_p4_m8" / "manifest.json").read_text())
    with pytest.raises(ConfigError, match="one pipeline of one process per rank"):
        harness_config({**man, "framework": {"name": "colossalai"}}, "/tmp/x", "1f1b", 1, 4)


def test_the_html_report_gets_the_table(tmp_path):
    from pipeaudit.report.html import render_html

    run = pipeaudit.load(MEMORY_RUN)
    page = render_html(run.timeline, run.audit(), advice=advise(run))
    assert "What to run instead" in page and "gpipe" in page and "the configuration the run ran" in page
    res = invoke("analyze", MEMORY_RUN, "--html", tmp_path / "r.html")
    assert res.exit_code == 0 and "What to run instead" in (tmp_path / "r.html").read_text()


def test_the_close_candidates_note_names_those_within_the_band():
    """The note names every candidate predicted within the order band of the advised one,
    marks the run's own configuration among them, and points to ``--verify auto``."""
    from pipeaudit.advise.advise import order_band

    a = advise(pipeaudit.load(MEMORY_RUN))
    note = next(n for n in a.notes if "predicted within" in n)
    named = note.split("not certain): ", 1)[1].split(";", 1)[0].split(", ")
    assert any(n.endswith("(the run's)") for n in named)  # 1F1B M=4, what the sample ran
    limit = a.best.predicted_step_time_us * (1 + order_band(abs(a.calibration["error"])))
    within = [f"{c.schedule} v={c.chunks} M={c.microbatches}" for c in a.candidates[1:]
              if c.predicted_step_time_us <= limit]
    assert [n.removesuffix(" (the run's)") for n in named] == within
    assert "`--verify auto` settles their order" in note


def test_a_tie_with_the_measured_configuration_keeps_it():
    """P=2, M=4 with the heavier stage: GPipe's order replays to the same step time as the
    run's 1F1B (each rank's compute back to back); no change is advised for no gain."""
    a = advise(pipeaudit.load(SAMPLES / "1f1b_p2_m4_imb_s1x3"))
    tied = [c for c in a.candidates
            if c.predicted_step_time_us == a.candidates[0].predicted_step_time_us]
    assert len(tied) > 1
    assert a.candidates[0].measured and a.best.measured


@pytest.mark.parametrize("sample,native", [
    ("deepspeed_p4_m8", {"1f1b"}),
    ("megatron_interleaved-1f1b_p4_m8_v2", {"1f1b", "interleaved-1f1b"}),
])
def test_a_framework_run_is_advised_what_its_framework_runs(sample, native):
    run = pipeaudit.load(SAMPLES / sample)
    a = advise(run)
    assert {c.schedule for c in a.candidates} == native
    assert any("--schedules names others" in n for n in a.notes)
    wider = advise(run, schedules=["gpipe", "zbv"])
    assert {"gpipe", "zbv"} <= {c.schedule for c in wider.candidates}
