"""``pipeaudit analyze --with-hta``: the HTA table beside the report, or one line saying why not."""

from __future__ import annotations

import json

import pytest

from pipeaudit.integrations import hta as hta_mod
from tests.support.paths import SAMPLES
from tests.support.cli import invoke
from tests.unit.integrations.test_hta import HTA_DIR, hta_installed, needs_traces, slow_with_hta


def _analyze(*args):
    return invoke("analyze", *args, catch_exceptions=False)


@slow_with_hta
@needs_traces
def test_analyze_with_hta_json_adds_hta_key_only_when_asked():
    files = [str(HTA_DIR / "nccl128_sampled_rank0.json.gz"), str(HTA_DIR / "nccl128_sampled_rank1.json.gz")]
    plain = json.loads(_analyze("--format", "json", *files).stdout)
    assert "hta" not in plain
    res = _analyze("--format", "json", "--with-hta", *files)
    assert res.exit_code == 0
    doc = json.loads(res.stdout)  # stderr: the no-pipeline note (a data-parallel run)
    hta = doc["hta"]
    assert hta["status"] == ("ok" if hta_installed else "not-installed")
    rows = {r["rank"]: r for r in hta["rows"]}
    assert set(rows) == {0, 1}
    for r in doc["ranks"]:
        assert rows[r["rank"]]["pipeaudit_idle"] == r["idle_fraction"]
        assert rows[r["rank"]]["pipeaudit_overlap"] == r["overlap"]
    assert rows[0]["pipeaudit_idle_hta_steps"] == pytest.approx(0.5356, abs=5e-4)
    assert rows[0]["hta_steps"] == "#551 (drops #552)"
    if hta_installed:
        assert rows[0]["hta_idle"] == pytest.approx(rows[0]["pipeaudit_idle_hta_steps"], abs=0.01)
        assert rows[0]["hta_overlap"] == pytest.approx(0.1181, abs=5e-4)
    else:
        assert rows[0]["hta_idle"] is None and "not installed" in hta["message"]


@slow_with_hta
@needs_traces
def test_analyze_with_hta_text_table():
    res = _analyze("--with-hta", str(HTA_DIR / "nccl128_sampled_rank0.json.gz"))
    assert res.exit_code == 0
    assert "HTA alongside" in res.output
    assert "55.2%" in res.output and "53.6%" in res.output


def test_analyze_with_hta_on_cpu_traces_says_hta_has_nothing_to_say():
    sample = str(SAMPLES / "1f1b_p2_m4")
    res = _analyze("--with-hta", "--format", "json", sample)
    assert res.exit_code == 0
    hta = json.loads(res.output)["hta"]
    assert hta["status"] == "no-gpu"
    assert "CPU-only" in hta["message"]
    text = _analyze("--with-hta", sample).output
    assert "HTA has nothing to say" in text


@needs_traces
def test_analyze_with_hta_when_hta_is_missing(monkeypatch):
    monkeypatch.setattr(hta_mod, "hta_version", lambda: None)
    res = _analyze("--with-hta", "--format", "markdown", str(HTA_DIR / "nccl128_sampled_rank0.json.gz"))
    assert res.exit_code == 0
    assert "HTA is not installed" in res.output and "pipeaudit[hta]" in res.output
