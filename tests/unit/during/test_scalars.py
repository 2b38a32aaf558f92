"""The logged scalars are analyze's and the baseline series' numbers (a real harness run)."""

from __future__ import annotations

import json
from statistics import median

import pytest

from pipeaudit.during.audit_window import audit_window, write_audit
from pipeaudit.during.scalars import scalars_of, tagged
from tests.support.cli import invoke
from tests.support.paths import SAMPLES

RUN = SAMPLES / "1f1b_p4_m8_imb_s1x3"


def test_scalars_equal_analyze_and_baseline(tmp_path):
    files = sorted(RUN.glob("rank*.json.gz"))
    got = audit_window(files, label="w", step=3, world_size=4)
    analyze = json.loads(invoke("analyze", *files, "--format", "json").stdout)
    assert invoke("baseline", *files, "-o", tmp_path / "b.json").exit_code == 0
    series = json.loads((tmp_path / "b.json").read_text())["series"]
    want = {"bubble": analyze["bubble"]["measured"], "theory": analyze["bubble"]["theory"],
            "replay_ideal": analyze["bubble"]["replay_ideal"],
            "step_time_ms": median(s["step_time_us"] for s in analyze["steps"]) / 1000,
            "exposed_comm": median(series["exposed_comm"]),
            "stage_imbalance": median(series["imbalance"])}
    want.update({f"stage{s}/compute_ms": median(map(sum, zip(*k.values()))) / 1000
                 for s, k in series["stage_compute_us"].items()})
    assert got.scalars == pytest.approx(want, rel=1e-12)
    # stage 1 is made three times heavier in this run: the imbalance says so
    assert got.scalars["stage_imbalance"] > 1.8
    assert max(range(4), key=lambda s: got.scalars[f"stage{s}/compute_ms"]) == 1
    assert list(tagged(got.scalars))[0] == "pipeaudit/bubble"
    assert scalars_of(analyze) == got.scalars  # the analyze document holds the per-step series
    analyze.pop("per_step")
    assert scalars_of(analyze).keys() == {"bubble", "theory", "replay_ideal", "step_time_ms"}


def test_audit_json_is_a_baseline_the_gate_reads(tmp_path):
    files = sorted((SAMPLES / "1f1b_p4_m8").glob("rank*.json.gz"))
    path = write_audit(tmp_path / "w" / "audit.json", audit_window(files, label="w", step=1,
                                                                   world_size=4))
    doc = json.loads(path.read_text())
    assert doc["schema_version"] == 1 and doc["window"]["ranks_present"] == [0, 1, 2, 3]
    slow = sorted(RUN.glob("rank*.json.gz"))
    gated = audit_window(slow, label="slow", baseline=str(path))
    assert gated.regressed
    assert any(c.scope == "stage" and c.index == 1 for c in gated.failed_checks)


def test_a_baseline_of_another_configuration_is_a_note_not_a_lost_audit(tmp_path):
    files = sorted((SAMPLES / "1f1b_p2_m4").glob("rank*.json.gz"))
    base = tmp_path / "b.json"
    assert invoke("baseline", *sorted(RUN.glob("rank*.json.gz")), "-o", base).exit_code == 0
    got = audit_window(files, label="w", baseline=str(base))
    assert got.scalars["bubble"] > 0 and got.gate is None and not got.regressed
    assert any(n.startswith("not gated: ") and "differs" in n for n in got.notes)
