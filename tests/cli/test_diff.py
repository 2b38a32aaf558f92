"""`pipeaudit diff` on the bundled real traces, saved documents and built runs."""

from __future__ import annotations

import json

import pytest

import pipeaudit
from tests.support.builders import build_run, one_f_one_b_orders
from pipeaudit.gate import diff_runs, snapshot_from_run
from tests.support.paths import SAMPLES
from tests.support.cli import invoke as _invoke


def invoke(*args):
    return _invoke(*args, catch_exceptions=False)


@pytest.fixture(scope="module")
def docs(tmp_path_factory):
    d = tmp_path_factory.mktemp("diff")
    a, b = d / "a.json", d / "b.json"
    assert invoke("analyze", SAMPLES / "1f1b_p4_m8", "--format", "json", "-o", a).exit_code == 0
    assert invoke("baseline", SAMPLES / "1f1b_p4_m8_imb_s1x3", "-o", b).exit_code == 0
    return a, b


def test_diff_real_traces_names_the_heavier_stage():
    r = invoke("diff", SAMPLES / "1f1b_p4_m8", SAMPLES / "1f1b_p4_m8_imb_s1x3")
    assert r.exit_code == 0, r.output
    last = r.stdout.strip().split("\n\n")[-1]  # the summary, wrapped with a hanging indent
    assert last.startswith("Changed most: stage 1 B compute") and "; stage 1 F compute" in last
    assert all(line.startswith("  ") for line in last.splitlines()[1:])
    assert "Stages, A -> B (median over steps of the compute per step, by kind" in r.stdout
    assert max(map(len, r.stdout.splitlines())) <= 120


def test_diff_from_documents_json_and_markdown(docs):
    a, b = docs
    r = invoke("diff", a, b, "--format", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["kind"] == "diff" and doc["schema_version"] == 1
    movers = doc["movers"]
    assert (movers[0]["stage"], movers[0]["what"]) == (1, "B compute")
    assert movers[0]["change"] > 0.5
    stage1 = next(s for s in doc["stages"] if s["stage"] == 1)
    assert stage1["compute_change"] > 0.5
    assert stage1["a"]["inflight"] == stage1["b"]["inflight"] == 3
    md = invoke("diff", a, b, "--format", "markdown").stdout
    assert md.startswith("## pipeaudit diff") and "| stage | rank |" in md
    assert "**Changed most: stage 1 B compute" in md


def test_diff_bad_document_exits_2(tmp_path, docs):
    bad = tmp_path / "x.json"
    bad.write_text('{"schema_version": 1, "tool": "pipeaudit", "num_ranks": "many"}')
    r = invoke("diff", bad, docs[1])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and str(bad) in r.stderr


def test_diff_built_exact(tmp_path):
    P, M = 4, 8
    base = build_run(tmp_path, one_f_one_b_orders(P, M), steps=2, name="a")
    heavy = build_run(tmp_path, one_f_one_b_orders(P, M), steps=2, name="b",
                      dur=lambda s, k, m: (1000 if k == "F" else 2000) * (3 if s == 3 and k == "B"
                                                                          else 1))
    d = diff_runs(snapshot_from_run(pipeaudit.load(base.directory)),
                  snapshot_from_run(pipeaudit.load(heavy.directory)))
    top = d.movers[0]
    assert (top.stage, top.what) == (3, "B compute")
    assert top.delta == pytest.approx(M * 4000, rel=0.01)  # 8 B's per step, 2000 -> 6000 µs
    assert [m for m in d.movers if m.what.endswith("compute")] == [top]
