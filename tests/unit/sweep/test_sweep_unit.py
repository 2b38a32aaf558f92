"""Sweep pieces that need no training run: grid, validation, results IO, table, plots
(the command: ``tests/cli/test_sweep_cli.py``)."""

from __future__ import annotations

import json

import pytest

from pipeaudit.errors import ConfigError
from pipeaudit.harness.config import ModelConfig, ProfileConfig
from pipeaudit.sweep import SweepRecord, SweepResult, expand_grid, load, save
from pipeaudit.sweep.grid import parse_int_list, parse_schedules
from pipeaudit.sweep.results import CSV_NAME, JSON_NAME, to_csv_text
from tests.support.child import run_python


# ----------------------------------------------------------------------------- grid
def test_grid_skips_exactly_what_the_harness_refuses():
    entries = expand_grid(["naive", "gpipe", "1f1b", "interleaved-1f1b", "zbv", "dualpipev"],
                          [2, 4], [1, 2, 4, 8], [2, 3])
    for e in entries:
        p = e.point
        cfg = ProfileConfig(out="-", schedule=p.schedule, stages=p.stages, microbatches=p.microbatches,
                            chunks=p.chunks)
        try:
            cfg.validate(check_out=False)
            harness_says = None
        except ConfigError as exc:
            harness_says = str(exc)
        assert e.skip_reason == harness_says, p
    by_key = {e.point.key: e for e in entries}
    assert "microbatches" in by_key["1f1b_p2_m1"].skip_reason
    assert by_key["1f1b_p2_m2"].skip_reason is None
    # v is free only for interleaved schedules: their keys carry it, one point per v
    assert {"interleaved-1f1b_p2_m4_v2", "interleaved-1f1b_p2_m4_v3"} <= set(by_key)
    assert "zbv_p2_m4" in by_key and by_key["zbv_p2_m4"].point.chunks == 2
    assert "gpipe_p2_m4" in by_key and by_key["gpipe_p2_m4"].point.chunks == 1
    assert by_key["dualpipev_p4_m4"].skip_reason and by_key["dualpipev_p4_m8"].skip_reason is None


def test_grid_model_too_small_for_the_stages_is_skipped_not_fatal():
    entries = expand_grid(["gpipe"], [2, 4], [4], model=ModelConfig(layers=3))
    reasons = {e.point.key: e.skip_reason for e in entries}
    assert reasons["gpipe_p2_m4"] is None
    assert "fewer than the 4 stages" in reasons["gpipe_p4_m4"]


def test_list_parsing():
    assert parse_int_list("2, 4,2,8", "--stages") == [2, 4, 8]
    with pytest.raises(ConfigError, match="--stages expects"):
        parse_int_list("2,x", "--stages")
    with pytest.raises(ConfigError, match=">= 1"):
        parse_int_list("0,2", "--microbatches")
    assert parse_schedules("gpipe,1f1b,gpipe") == ["gpipe", "1f1b"]
    with pytest.raises(ConfigError, match="unknown schedule 'gpipee'"):
        parse_schedules("gpipe,gpipee")


# ----------------------------------------------------------------------- results IO
def _records() -> list[SweepRecord]:
    out = []
    for sched, ms in (("gpipe", (1, 2, 4)), ("1f1b", (2, 4))):
        for m in ms:
            th = 1 / (m + 1)
            out.append(SweepRecord(key=f"{sched}_p2_m{m}", schedule=sched, stages=2, microbatches=m,
                                   chunks=1, status="ok", measured_bubble=th + 0.1, theory_bubble=th,
                                   theory_formula="(P-1)/(M+P-1)", replay_ideal=th + 0.02,
                                   step_time_us=1000.0 * m, throughput_samples_s=4000.0,
                                   global_batch=4 * m, peak_memory_bytes=2**20 * m,
                                   peak_inflight=m if sched == "gpipe" else 2,
                                   expected_peak_inflight=m if sched == "gpipe" else 2,
                                   findings=["BUBBLE_ABOVE_THEORY"], run_dir=f"runs/{sched}_p2_m{m}"))
    out.insert(3, SweepRecord(key="1f1b_p2_m1", schedule="1f1b", stages=2, microbatches=1, chunks=1,
                              status="skipped", reason="schedule 1f1b needs at least ..."))
    return out


def test_results_roundtrip_and_csv(tmp_path):
    res = SweepResult(options={"steps": 2, "model": {"layers": 2}}, records=_records())
    save(res, tmp_path)
    back = load(tmp_path)
    assert back.records == res.records and back.options == res.options
    doc = json.loads((tmp_path / JSON_NAME).read_text())
    assert doc["schema_version"] == 1 and doc["tool"] == "pipeaudit sweep"
    lines = (tmp_path / CSV_NAME).read_text().splitlines()
    assert lines[0].startswith("key,schedule,stages,microbatches,chunks,status,reason,measured_bubble")
    assert len(lines) == 1 + len(res.records)
    assert "BUBBLE_ABOVE_THEORY" in lines[1] and lines[4].startswith("1f1b_p2_m1,1f1b,2,1,1,skipped")
    assert to_csv_text(res) == (tmp_path / CSV_NAME).read_text()


def test_library_imports_without_click_torch_matplotlib_or_hta():
    code = ("import sys, pipeaudit.sweep, pipeaudit.report.sweep_text, pipeaudit.report.sweep_plots, "
            "pipeaudit.sweep.progress, pipeaudit.integrations.hta, pipeaudit.timeline.idle; "
            "bad = sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'matplotlib', 'click', 'hta'}); "
            "assert not bad, bad")
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
