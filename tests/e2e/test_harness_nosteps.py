"""``--no-step-marks``: real runs profiled in a plain ``with torch.profiler.profile():``.

No profiler schedule and no ``prof.step()``: the traces hold no ``ProfilerStep#i`` span, while
the optimizer's own spans still close every step. With ``--no-annotate`` too, torch's
``Schedule1F1B`` writes no per-action span at all (the traces users bring). A rank that fails
still writes what it has, as a partial trace naming the step that was cut.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

from pipeaudit.harness.faults import ENV_VAR as FAULT_ENV  # noqa: E402
from pipeaudit.trace.cut import PARTIAL_KEY  # noqa: E402
from tests.support.cli import invoke
from tests.support.kineto import load, names

pytestmark = pytest.mark.slow
TINY = ["--hidden", "64", "--seq-len", "8", "--steps", "2", "--warmup-steps", "1", "--layers", "2",
        "--stages", "2"]




def run(tmp_path: Path, *args: str, env: dict | None = None):
    out = tmp_path / "run"
    res = invoke("profile", *args, *TINY, "--out", str(out), env=env)
    return out, res


def test_unannotated_1f1b_without_step_marks(tmp_path):
    out, res = run(tmp_path, "--schedule", "1f1b", "--microbatches", "4", "--no-annotate",
                   "--no-step-marks")
    assert res.exit_code == 0, res.output
    man = json.loads((out / "manifest.json").read_text())
    assert man["step_marks"] is False and man["annotated"] is False
    for r in range(2):
        doc = load(out / f"rank{r}.json.gz")
        assert doc[PARTIAL_KEY] is None  # a complete trace
        c = names(doc)
        assert not [n for n in c if n.startswith(("ProfilerStep#", "PP:", "Forward ", "Backward "))]
        # the steps are still visible through the optimizer's own annotations
        assert c["Optimizer.step#SGD.step"] == 2 and c["Optimizer.zero_grad#SGD.zero_grad"] == 2
        assert any(n.startswith("autograd::engine::evaluate_function") for n in c)
        assert c["c10d::send"] > 0 and c["c10d::recv_"] > 0


def test_annotated_gpipe_without_step_marks_keeps_every_action(tmp_path):
    m = 3
    out, res = run(tmp_path, "--schedule", "gpipe", "--microbatches", str(m), "--no-step-marks")
    assert res.exit_code == 0, res.output
    for r in range(2):
        c = names(load(out / f"rank{r}.json.gz"))
        assert not [n for n in c if n.startswith("ProfilerStep#")]
        for mb in range(m):  # both profiled steps, each action once per step
            assert c[f"PP:{r}F{mb}"] == c[f"PP:{r}B{mb}"] == 2
            assert c[f"Forward {mb}"] == c[f"Backward {mb}"] == 2  # torch's own GPipe spans


def test_failed_rank_without_step_marks_writes_its_finished_steps(tmp_path):
    out, res = run(tmp_path, "--schedule", "1f1b", "--microbatches", "2", "--no-step-marks",
                   "--no-annotate", "--timeout", "120", env={FAULT_ENV: "1:2:raise"})
    assert res.exit_code == 2
    assert "rank 1 failed during profile step 2" in res.stderr
    assert not (out / "manifest.json").exists()
    for r in range(2):  # the failed rank and the rank stopped because of it
        doc = load(out / f"partial-rank{r}.json.gz")
        # profiled step 1 (training step 2, after one warm-up step) was cut; step 0 is whole
        assert doc[PARTIAL_KEY] == 1
        c = names(doc)
        assert c["Optimizer.step#SGD.step"] == 1
        assert not [n for n in c if n.startswith("ProfilerStep#")]


def analyze_json(*paths: Path, extra: tuple[str, ...] = ()) -> tuple[int, dict | None, str]:
    res = invoke("analyze", "--format", "json", *extra, *map(str, paths))
    doc = json.loads(res.stdout) if res.exit_code == 0 else None
    return res.exit_code, doc, res.stderr


@pytest.mark.parametrize("schedule,stages,m,layers", [
    ("1f1b", 2, 2, 8),   # 4 blocks a stage, op for op alike: one backward is 4 repeats
    ("gpipe", 3, 2, 6),  # M < P
    ("1f1b", 3, 3, 3),   # M = P, the fewest torch's Schedule1F1B takes
])
def test_unannotated_run_without_manifest_known_answer(tmp_path, schedule, stages, m, layers):
    """The traces alone (no manifest beside them), no annotation and no step mark: M, the
    steps, the schedule and one F and one B per microbatch and step on every stage."""
    out = tmp_path / "run"
    args = ["profile", "--schedule", schedule, "--microbatches", str(m), "--no-annotate",
            "--no-step-marks", *TINY[:-4], "--layers", str(layers), "--stages", str(stages),
            "--out", str(out)]
    res = invoke(*args)
    assert res.exit_code == 0, res.output
    bare = tmp_path / "bare"
    bare.mkdir()
    for r in range(stages):
        (bare / f"rank{r}.json.gz").write_bytes((out / f"rank{r}.json.gz").read_bytes())
    code, doc, err = analyze_json(bare)
    assert code == 0, err
    assert doc["manifest"] is None  # GPipe's actions: torch's own Forward/Backward spans
    assert doc["actions_inferred"] == (schedule == "1f1b")
    assert doc["num_microbatches"] == m and doc["num_steps"] == 2
    assert doc["schedule"] == schedule and doc["schedule_source"] != "manifest"
    for st in doc["stages"]:
        assert st["actions"]["F"] == st["actions"]["B"] == 2 * m, st


def test_failed_rank_without_step_marks_is_analyzed_up_to_its_cut(tmp_path):
    """A rank that failed in profiled step 1 of a run without step marks: its partial trace
    (and the one of the rank stopped with it) are cut after their first optimizer step, and
    that step is audited whole."""
    m = 2
    out, res = run(tmp_path, "--schedule", "1f1b", "--microbatches", str(m), "--no-step-marks",
                   "--no-annotate", "--timeout", "120", env={FAULT_ENV: "1:2:raise"})
    assert res.exit_code == 2
    code, doc, err = analyze_json(out)
    assert code == 0, err
    assert doc["num_steps"] == 1 and doc["num_microbatches"] == m
    codes = [f["code"] for f in doc["findings"]]
    assert codes.count("PARTIAL_TRACE") == 2 and "MISSING_ACTIONS" not in codes, codes
    for st in doc["stages"]:
        assert st["actions"]["F"] == st["actions"]["B"] == m
    assert all("optimizer step #0" in f["message"] for f in doc["findings"]
               if f["code"] == "PARTIAL_TRACE")
