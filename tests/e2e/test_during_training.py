"""A real pipelined training run that audits itself (examples/train_with_handler.py):
torchrun, 4 ranks, gloo, CPU, 1F1B, ``schedule(wait=1, warmup=1, active=2, repeat=3)`` and
``pipeaudit.profiler.trace_handler``; rank 3 loses its trace of the 2nd window.

One run, checked from every side: three windows audited, the 2nd after the rank timeout with
a note; TensorBoard's event file (read with tensorboard's EventAccumulator), MLflow's local
store and W&B's offline run hold the numbers ``pipeaudit analyze`` / ``baseline`` give on the
same files; ``pipeaudit watch`` finds the same windows in torch's file names alone.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from statistics import median

import pytest

from tests.support.cli import invoke
from tests.support.child import repo_env
from tests.support.paths import REPO

pytestmark = pytest.mark.slow

EXAMPLE = REPO / "examples" / "train_with_handler.py"
SCALARS = ("bubble", "theory", "replay_ideal", "step_time_ms", "exposed_comm",
           "stage_imbalance")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("tensorboard")
    base = tmp_path_factory.mktemp("during")
    env = repo_env(WANDB_SILENT="true", WANDB_MODE="offline",
                   TMPDIR=str(base))  # torchrun leaves its log folder (torchelastic_*) there
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "4",
           "--master-port", str(_free_port()), str(EXAMPLE), "--out", str(base / "tb"),
           "--hidden", "16", "--microbatches", "4", "--skip-trace", "3:2",
           "--rank-timeout", "4", "--wait-audits", "240",  # every window in W&B's run
           # prompt audits on a machine other jobs load (the default, low priority, is what
           # benchmarks/handler_overhead.py measures)
           "--audit-normal-priority"]
    has_mlflow = _has("mlflow")
    has_wandb = _has("wandb")
    if has_mlflow:
        cmd += ["--mlflow", f"file:{base / 'mlruns'}"]
    if has_wandb:
        cmd += ["--wandb-offline", str(base)]
    res = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    return base, res, has_mlflow, has_wandb


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _free_port() -> int:
    from pipeaudit.harness.launcher import free_port

    return free_port()


def _windows(base):
    from pipeaudit.during.index import read_entries, window_folders

    return [(f, read_entries(f), json.loads((f / "audit.json").read_text()))
            for f in window_folders(base / "tb")]


def _expected(files, tmp) -> dict[str, float]:
    """The window's numbers from `pipeaudit analyze` and `pipeaudit baseline` on its files."""
    res = invoke("analyze", *files, "--format", "json", "--allow-missing")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    out = {"bubble": doc["bubble"]["measured"], "theory": doc["bubble"]["theory"],
           "replay_ideal": doc["bubble"]["replay_ideal"],
           "step_time_ms": median(s["step_time_us"] for s in doc["steps"]) / 1000}
    path = tmp / "base.json"
    res = invoke("baseline", *files, "-o", path, "--force", "--allow-missing")
    assert res.exit_code == 0, res.output
    series = json.loads(path.read_text())["series"]
    out["exposed_comm"] = median(series["exposed_comm"])
    out["stage_imbalance"] = median(series["imbalance"])
    for stage, kinds in series["stage_compute_us"].items():
        out[f"stage{stage}/compute_ms"] = median(map(sum, zip(*kinds.values()))) / 1000
    return {k: v for k, v in out.items() if v is not None}  # no replay with a rank missing


def test_three_windows_audited_and_training_finished(trained):
    base, res, _, _ = trained
    assert res.returncode == 0, res.stderr[-3000:]
    assert "3 window(s) audited: step 4, step 8, step 12" in res.stdout
    windows = _windows(base)
    assert [json_doc["window"]["step"] for _, _, json_doc in windows] == [4, 8, 12]
    for folder, entries, doc in windows:
        assert doc["schema_version"] == 1 and doc["kind"] == "baseline"
        assert doc["audit"]["schedule"] == "1f1b" and doc["audit"]["num_microbatches"] == 4
        assert doc["audit"]["num_steps"] == 2  # active=2
        for e in entries:  # torch's own file names, in the handler's folder
            assert e.trace.parent == base / "tb"
            assert e.trace.name.endswith(".pt.trace.json") and e.trace.name.count(".") == 4


def test_missing_rank_audited_after_timeout_with_a_note(trained):
    base, res, _, _ = trained
    _, entries, doc = _windows(base)[1]
    assert [e.rank for e in entries] == [0, 1, 2]
    assert doc["window"]["ranks_missing"] == [3] and doc["window"]["waited_s"] >= 4
    assert doc["audit"]["ranks_missing"] == [3]
    assert any("rank 3 of world size 4 wrote no trace" in n for n in doc["notes"])
    assert "rank 3 of world size 4 wrote no trace" in res.stderr  # logged by the handler
    for _, _, other in (_windows(base)[0], _windows(base)[2]):
        assert other["window"]["ranks_missing"] == [] and other["notes"] == []


def test_tensorboard_mlflow_wandb_hold_analyze_numbers(trained, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    base, res, has_mlflow, has_wandb = trained
    assert res.returncode == 0, res.stderr[-3000:]
    ea = EventAccumulator(str(base / "tb"))
    ea.Reload()
    tb = {tag: {e.step: e.value for e in ea.Scalars(tag)} for tag in ea.Tags()["scalars"]}
    if has_mlflow:
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=f"file:{base / 'mlruns'}")
        (run,) = client.search_runs(["0"])
        ml = {k: {m.step: m.value for m in client.get_metric_history(run.info.run_id, k)}
              for k in run.data.metrics}
    if has_wandb:
        from tests.support.wandb_offline import history

        (run_dir,) = (base / "wandb").glob("offline-run-*")
        rows = history(run_dir)
        wb = {int(r["pipeaudit/profiler_step"]): r for r in rows}
        assert list(wb) == [4, 8, 12]  # logged in window order
    for _, entries, doc in _windows(base):
        step = doc["window"]["step"]
        want = _expected([e.trace for e in entries], tmp_path)
        assert set(want) >= set(SCALARS) - ({"replay_ideal"} if step == 8 else set())
        assert {k for k in want if k.startswith("stage") and k.endswith("compute_ms")} == \
            {f"stage{s}/compute_ms" for s in (range(3) if step == 8 else range(4))}
        assert doc["scalars"] == pytest.approx(want, rel=1e-9)
        for name, value in want.items():
            tag = f"pipeaudit/{name}"
            assert tb[tag][step] == pytest.approx(value, rel=1e-6)  # float32 in the event file
            if has_mlflow:
                assert ml[tag][step] == pytest.approx(value, rel=1e-12)
            if has_wandb:
                assert wb[step][tag] == pytest.approx(value, rel=1e-12)


def test_watch_finds_the_same_windows_from_torch_names_alone(trained, tmp_path):
    """Without the handler's index (as tensorboard_trace_handler leaves a folder), watch groups
    the files by their first ProfilerStep: the same three windows, the same numbers."""
    base, _, _, _ = trained
    flat = tmp_path / "flat"
    flat.mkdir()
    for p in (base / "tb").glob("*.pt.trace.json"):
        shutil.copy(p, flat / p.name)
    res = invoke("watch", flat, "--once", "--format", "json")
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout)["windows"]
    assert len(got) == 3
    for w, (_, entries, doc) in zip(got, _windows(base)):
        assert sorted(os.path.basename(f) for f in w["files"]) == \
            sorted(e.trace.name for e in entries)
        assert w["scalars"] == pytest.approx(doc["scalars"], rel=1e-9)
    assert got[1]["ranks_missing"] == [3]


def test_every_command_reads_the_handlers_folder(trained, tmp_path):
    """analyze, baseline and gate on the handler's folder (its latest window, with a note), on
    one window folder it made and on torch's own names alone: exit 0, the right window, the
    numbers of the window's audit.json (what watch and the handler report)."""
    base, _, _, _ = trained
    windows = _windows(base)
    flat = tmp_path / "flat"
    flat.mkdir()
    for p in (base / "tb").glob("*.pt.trace.json"):
        shutil.copy(p, flat / p.name)
    folder, _, doc = windows[0]
    cases = [(base / "tb", (), windows[-1][2], "read step 12, the latest"),
             (folder, (), doc, None), (flat, ("--window", "all"), None, None),
             (flat, (), windows[-1][2], "holds 3 profiled windows")]
    for path, extra, want, note in cases:
        res = invoke("analyze", path, *extra, "--format", "json")
        assert res.exit_code == 0, res.output
        got = json.loads(res.stdout)
        if want is None:  # all: one row per window, watch's numbers
            assert [w["scalars"] for w in got["windows"]] == \
                pytest.approx([d["scalars"] for _, _, d in windows], rel=1e-9)
            continue
        assert got["bubble"] == want["audit"]["bubble"] and got["steps"] == want["audit"]["steps"]
        assert (note in res.stderr) if note else res.stderr == ""
        out = tmp_path / "b.json"
        res = invoke("baseline", path, *extra, "-o", out)
        assert res.exit_code == 0, res.output
        assert json.loads(out.read_text())["series"] == want["series"]
        res = invoke("gate", path, *extra, "--baseline", out)
        assert res.exit_code == 0, res.output
