"""``pipeaudit profile --framework deepspeed|megatron``: real DeepSpeed PipelineEngine and
Megatron-core runs (CPU, gloo), read with their annotations and without them."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import pipeaudit
from pipeaudit.errors import ConfigError
from pipeaudit.explain.link import manifest_link
from pipeaudit.harness import ProfileConfig
from tests.support.cli import invoke
from tests.support.child import repo_env
from tests.support.strip import strip_run


@pytest.mark.parametrize("changes,fragment", [
    ({"schedule": "gpipe"}, "runs its own TrainSchedule"),
    ({"single_process": True}, "one process per stage"),
    ({"tp": 2}, "no --tp"),
    ({"chunks": 2}, "no --chunks"),
    ({"framework": "nemo"}, "--framework must be one of"),
])
def test_deepspeed_options_checked_before_start(changes, fragment, tmp_path):
    cfg = ProfileConfig(out=str(tmp_path / "o"), framework="deepspeed", stages=2, microbatches=4)
    with pytest.raises(ConfigError, match=fragment):
        cfg.replace(**changes).validate()


def test_deepspeed_runs_m_below_p(tmp_path):
    """DeepSpeed's TrainSchedule takes any M, torch's Schedule1F1B needs M >= P."""
    ProfileConfig(out=str(tmp_path / "o"), framework="deepspeed", stages=4, microbatches=2).validate()
    with pytest.raises(ConfigError, match="M >= P"):
        ProfileConfig(out=str(tmp_path / "o"), stages=4, microbatches=2).validate()


@pytest.mark.slow
def test_real_deepspeed_run(tmp_path):
    pytest.importorskip("deepspeed")
    out = tmp_path / "ds"
    res = invoke("profile", "--framework", "deepspeed", "-P", "2", "-M", "3", "--hidden", "64",
                 "--seq-len", "8", "--steps", "2", "--out", out)
    assert res.exit_code == 0, res.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["framework"]["name"] == "deepspeed" and manifest["annotation_source"] == "harness"
    assert manifest_link(manifest).sizes == 3  # the link timed before the profiled steps
    annotated = pipeaudit.load(out).audit()
    assert (annotated.schedule, annotated.num_microbatches, annotated.num_steps) == ("1f1b", 3, 2)
    bare = pipeaudit.load(strip_run(out, tmp_path / "bare")).audit()
    assert bare.actions_inferred and bare.schedule == "1f1b" and bare.num_microbatches == 3
    truth = {r.rank: r.bubble for r in annotated.ranks}
    for r in bare.ranks:
        assert r.bubble == pytest.approx(truth[r.rank], abs=0.005)


@pytest.mark.parametrize("changes,fragment", [
    ({"schedule": "zbv", "chunks": None}, "with or without virtual stages"),
    ({"dp": 2}, "no --dp"),
    ({"tp": 2}, "no --tp"),
])
def test_megatron_options_checked_before_start(changes, fragment, tmp_path):
    cfg = ProfileConfig(out=str(tmp_path / "o"), framework="megatron", stages=2, microbatches=4)
    with pytest.raises(ConfigError, match=fragment):
        cfg.replace(**changes).validate()


@pytest.mark.slow
def test_real_megatron_interleaved_run(tmp_path):
    """Megatron-core's own interleaved schedule on CPU (its six CUDA-only lines redirected at
    run time): with virtual stages, read without annotations as 2P stages and M microbatches."""
    pytest.importorskip("megatron.core")
    out = tmp_path / "mg"
    res = invoke("profile", "--framework", "megatron", "--schedule", "interleaved-1f1b",
                 "--chunks", "2", "-P", "2", "-M", "4", "--layers", "4", "--hidden", "64",
                 "--seq-len", "8", "--steps", "2", "--out", out)
    assert res.exit_code == 0, res.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["framework"]["name"] == "megatron-core"
    assert manifest_link(manifest).sizes == 3
    annotated = pipeaudit.load(out).audit()
    assert "interleaved-1f1b" in annotated.detected_schedules
    bare = pipeaudit.load(strip_run(out, tmp_path / "bare")).audit()
    assert bare.actions_inferred and bare.schedule == "interleaved-1f1b"
    assert (bare.num_ranks, bare.num_stages, bare.num_microbatches) == (2, 4, 4)


@pytest.mark.slow
def test_a_run_leaves_nothing_in_the_temporary_folder(tmp_path, request):
    """Megatron-core imports wandb, which makes two temporary folders in each rank; a rank ends
    with os._exit, which skips their removal: the ranks' temporary files go to the run's own
    folder, removed with it."""
    pytest.importorskip("megatron.core")
    # a short folder of its own: multiprocessing's socket lives under TMPDIR, and a Unix
    # socket's path has at most 107 bytes (a deep pytest folder ran past it)
    tmp = Path(tempfile.mkdtemp(prefix="pa-", dir="/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(tmp, ignore_errors=True))
    env = repo_env(TMPDIR=str(tmp))
    proc = subprocess.run([sys.executable, "-m", "pipeaudit", "profile", "--framework", "megatron",
                           "-P", "2", "-M", "2", "--layers", "2", "--hidden", "32", "--seq-len",
                           "8", "--steps", "1", "--out", str(tmp_path / "mg")],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "mg" / "manifest.json").exists()
    assert sorted(p.name for p in tmp.iterdir()) == []
