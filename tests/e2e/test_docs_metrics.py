"""docs/metrics.md's worked examples, computed by hand there, are what pipeaudit reports; and
docs/cli.md documents every option of every command that exists."""

from __future__ import annotations

import re

import pytest

import pipeaudit
from tests.support.builders import build_run, one_f_one_b_orders
from pipeaudit.cli.main import COMMANDS, cli
from tests.support.paths import DOCS
from tests.support.cli import invoke

TOL = 0.002  # the builder's send op takes 1 µs of each sending action's 1000 µs


def audit(tmp_path, **kw):
    built = build_run(tmp_path, one_f_one_b_orders(2, 2), **kw)
    return pipeaudit.load(built.directory).audit()


def test_example_1_even_stages(tmp_path):
    r = audit(tmp_path)
    assert r.steps[0].step_time_us == pytest.approx(9000, abs=5)
    assert [x.bubble for x in r.ranks] == pytest.approx([1 / 3, 1 / 3], abs=TOL)
    assert r.bubble.measured == pytest.approx(1 / 3, abs=TOL)
    assert r.bubble.theory == pytest.approx(1 / 3) and r.bubble.ratio == pytest.approx(0.5)
    assert {s.stage: s.peak_inflight for s in r.stages} == {0: 2, 1: 1}


def test_example_2_communication(tmp_path):
    r = audit(tmp_path, latency=500)
    assert r.steps[0].step_time_us == pytest.approx(10000, abs=5)
    assert r.bubble.measured == pytest.approx(0.4, abs=TOL)
    assert r.bubble.replay_ideal == pytest.approx(1 / 3, abs=TOL)
    assert r.bubble.imbalance_part == pytest.approx(0, abs=TOL)
    assert r.bubble.overhead_part == pytest.approx(0.067, abs=TOL)
    codes = {f.code for f in r.findings}
    assert {"BUBBLE_ABOVE_THEORY", "EXPOSED_COMMUNICATION"} <= codes


def test_example_3_slow_stage(tmp_path):
    r = audit(tmp_path, dur=lambda s, k, m: {"F": 1000, "B": 2000}[k] * (2 if s == 1 else 1))
    assert r.steps[0].step_time_us == pytest.approx(15000, abs=5)
    assert [x.bubble for x in r.ranks] == pytest.approx([0.6, 0.2], abs=TOL)
    assert r.bubble.measured == pytest.approx(0.4, abs=TOL)
    assert r.bubble.replay_ideal == pytest.approx(0.4, abs=TOL)
    assert r.bubble.imbalance_part == pytest.approx(0.067, abs=TOL)
    assert r.bubble.overhead_part == pytest.approx(0, abs=TOL)
    imb = [f for f in r.findings if f.code == "STAGE_IMBALANCE"]
    assert len(imb) == 1 and imb[0].stage == 1
    assert imb[0].measured == pytest.approx(12 / 9, abs=TOL) and imb[0].expected == 1.0


def test_cli_doc_names_every_option_of_every_command():
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    names = cli.list_commands(None)  # type: ignore[arg-type]
    assert set(names) <= set(COMMANDS)
    for name in names:
        assert re.search(rf"^## `pipeaudit {name}`", text, re.M), f"docs/cli.md has no section for {name}"
        help_text = invoke(name, "--help").output
        for opt in sorted(set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]+)", help_text))):
            assert opt in text, f"docs/cli.md does not mention {name} {opt}"
