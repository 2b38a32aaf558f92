"""``--no-step-marks``: real runs profiled in a plain ``with torch.profiler.profile():``.

No profiler schedule and no ``prof.step()``: the traces hold no ``ProfilerStep#i`` span, while
the optimizer's own spans still close every step. With ``--no-annotate`` too, torch's
``Schedule1F1B`` writes no per-action span at all (the traces users bring). A rank that fails
still writes what it has, as a partial trace naming the step that was cut.
"""

from __future__ import annotations

import collections
import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("torch")

from pipeaudit.cli.main import cli  # noqa: E402
from pipeaudit.harness.faults import ENV_VAR as FAULT_ENV  # noqa: E402
from pipeaudit.trace.cut import PARTIAL_KEY  # noqa: E402

pytestmark = pytest.mark.slow
TINY = ["--hidden", "64", "--seq-len", "8", "--steps", "2", "--warmup-steps", "1", "--layers", "2",
        "--stages", "2"]


def load(path: Path) -> dict:
    with gzip.open(path, "rt") as f:
        return json.load(f)


def names(doc: dict) -> collections.Counter:
    return collections.Counter(e["name"] for e in doc["traceEvents"] if e.get("ph") == "X")


def run(tmp_path: Path, *args: str, env: dict | None = None):
    out = tmp_path / "run"
    res = CliRunner().invoke(cli, ["profile", *args, *TINY, "--out", str(out)], env=env)
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
