"""Every command reads a folder of profiling cycles (--window latest|all|LABEL), on real traces
laid out as each writer leaves them: torch's own ``{worker}.{ns}.pt.trace.json.gz`` names, the
handler's index and window folders, torchtitan's ``iteration_N/``, Megatron-LM's two layouts.
The numbers must be those of `analyze` on the original files and those `watch` prints."""

from __future__ import annotations

import json
import shutil

import pytest

from pipeaudit.trace.window_index import window_folder, write_entry
from tests.support.cli import invoke
from tests.support.paths import SAMPLES

BASE = SAMPLES / "1f1b_p4_m8"
SLOW = SAMPLES / "1f1b_p4_m8_imb_s1x3"  # stage 1 three times heavier


def _torch_names(dst, cycles, pid=100):
    """torch's tensorboard_trace_handler names: one process per rank (``host_{pid}``), its
    k-th export at a later ns. Returns the files of each cycle."""
    dst.mkdir(parents=True, exist_ok=True)
    out = []
    for k, src in enumerate(cycles, 1):
        names = [f"host_{pid + r}.{k}00000000{r}.pt.trace.json.gz" for r in range(4)]
        for r, name in enumerate(names):
            shutil.copy(src / f"rank{r}.json.gz", dst / name)
        out.append(names)
    return out


def _json(*args):
    res = invoke(*args, "--format", "json")
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout), res.stderr


def _numbers(doc):
    return doc["bubble"]["measured"], [s["step_time_us"] for s in doc["steps"]]


@pytest.fixture(scope="module")
def originals():
    return {src: _numbers(_json("analyze", src)[0]) for src in (BASE, SLOW)}


@pytest.fixture(scope="module")
def slow_baseline(tmp_path_factory):
    path = tmp_path_factory.mktemp("win") / "slow.json"
    assert invoke("baseline", SLOW, "-o", path).exit_code == 0
    return path


def test_torch_names_latest_cycle_by_default_with_a_note(tmp_path, originals, slow_baseline):
    _torch_names(tmp_path / "tb", [BASE, SLOW])
    doc, err = _json("analyze", tmp_path / "tb")
    assert _numbers(doc) == originals[SLOW]
    assert "holds 2 profiled windows (step 0 cycle 1, step 0 cycle 2); read step 0 cycle 2, " \
           "the latest" in err
    doc, _ = _json("analyze", tmp_path / "tb", "--window", "step_0_cycle_1")
    assert _numbers(doc) == originals[BASE]
    res = invoke("baseline", tmp_path / "tb", "-o", tmp_path / "b.json")
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "b.json").read_text())["audit"]["bubble"]["measured"] == \
        originals[SLOW][0]
    res = invoke("gate", tmp_path / "tb", "--baseline", slow_baseline)
    assert res.exit_code == 0, res.output


def test_window_all_rows_are_watchs(tmp_path, slow_baseline):
    _torch_names(tmp_path / "tb", [BASE, SLOW])
    watch = invoke("watch", tmp_path / "tb", "--once", "--gate", slow_baseline, "--format", "json")
    watched = json.loads(watch.stdout)
    res = invoke("gate", tmp_path / "tb", "--window", "all", "--baseline", slow_baseline,
                 "--format", "json")
    assert res.exit_code == watch.exit_code, res.output
    gated = json.loads(res.stdout)
    assert [w["label"] for w in gated["windows"]] == ["step 0 cycle 1", "step 0 cycle 2"]
    assert [w["scalars"] for w in gated["windows"]] == [w["scalars"] for w in watched["windows"]]
    assert [w["gate"]["verdict"] for w in gated["windows"]] == \
        [w["gate"]["verdict"] for w in watched["windows"]]
    analyzed, _ = _json("analyze", tmp_path / "tb", "--window", "all")
    assert [w["scalars"] for w in analyzed["windows"]] == [w["scalars"] for w in watched["windows"]]
    assert analyzed["windows"][0]["audit"]["schema_version"] == 1
    text = invoke("analyze", tmp_path / "tb", "--window", "all")
    assert text.exit_code == 0
    rows = text.stdout.splitlines()
    assert rows[0].startswith("step 0 cycle 1: bubble 49.2%") and "2 window(s) in" in text.stdout
    assert all(len(line) <= 120 for line in rows)


def test_two_runs_in_one_folder_still_conflict(tmp_path):
    """Different processes wrote rank 0's two files of the same steps: two runs, not cycles."""
    _torch_names(tmp_path, [BASE], pid=100)
    _torch_names(tmp_path, [SLOW], pid=200)
    res = invoke("analyze", tmp_path)
    assert res.exit_code == 2 and "rank 0 is in two files" in res.stderr
    assert res.stderr.count("\n") == 1


def _handler_folder(root, runs):
    """What pipeaudit.profiler.trace_handler leaves: torch's names beside the traces and its
    index, pipeaudit/step_{N}/rank{r}.json (written by the handler's own writer)."""
    for step, names in zip((4, 8), _torch_names(root, runs)):
        for r, name in enumerate(names):
            write_entry(window_folder(root, step), r, 4, name, step)


def test_handler_folder_and_window_folder(tmp_path, originals, slow_baseline):
    _handler_folder(tmp_path / "tb", [SLOW, BASE])
    doc, err = _json("analyze", tmp_path / "tb")
    assert _numbers(doc) == originals[BASE] and "read step 8, the latest" in err
    one = window_folder(tmp_path / "tb", 4)
    doc, err = _json("analyze", one)
    assert _numbers(doc) == originals[SLOW] and err == ""
    for label in ("step_00000004", "step 4", "pipeaudit/step_00000004"):
        assert _numbers(_json("analyze", tmp_path / "tb", "--window", label)[0]) == \
            originals[SLOW]
    res = invoke("baseline", one, "-o", tmp_path / "b.json")
    assert res.exit_code == 0, res.output
    res = invoke("gate", one, "--baseline", slow_baseline)
    assert res.exit_code == 0, res.output
    watched, _ = _json("watch", tmp_path / "tb", "--once")
    analyzed, _ = _json("analyze", tmp_path / "tb", "--window", "all")
    assert [w["label"] for w in analyzed["windows"]] == ["step 4", "step 8"]
    assert [w["scalars"] for w in analyzed["windows"]] == [w["scalars"] for w in watched["windows"]]


def test_iteration_folders_and_megatron_layouts(tmp_path, originals):
    for n, src in ((10, BASE), (20, SLOW)):  # torchtitan
        d = tmp_path / "titan" / "profile_trace" / f"iteration_{n}"
        d.mkdir(parents=True)
        for r in range(4):
            shutil.copy(src / f"rank{r}.json.gz", d / f"rank{r}_trace.json.gz")
    doc, err = _json("analyze", tmp_path / "titan")
    assert _numbers(doc) == originals[SLOW] and "read profile_trace/iteration_20" in err
    doc, _ = _json("analyze", tmp_path / "titan", "--window", "iteration_10")
    assert _numbers(doc) == originals[BASE]
    # Megatron-LM up to early 2026: tensorboard_trace_handler into --tensorboard-dir, beside
    # TensorBoard's event file; since: {tensorboard_dir}/../torch_profile/rank-{r}.json.gz
    tb = tmp_path / "megatron" / "tensorboard"
    _torch_names(tb, [BASE])
    (tb / "events.out.tfevents.1.host").write_bytes(b"\x00" * 16)
    assert _numbers(_json("analyze", tb)[0]) == originals[BASE]
    prof = tmp_path / "megatron" / "torch_profile"
    prof.mkdir()
    for r in range(4):
        shutil.copy(SLOW / f"rank{r}.json.gz", prof / f"rank-{r}.json.gz")
    assert _numbers(_json("analyze", prof)[0]) == originals[SLOW]


def test_diff_explain_export_take_the_window(tmp_path):
    _torch_names(tmp_path / "tb", [BASE, SLOW])
    res = invoke("diff", BASE, tmp_path / "tb", "--window", "all")
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0].startswith("step 0 cycle 1: against 1f1b_p4_m8: No stage changed")
    assert lines[1].startswith("step 0 cycle 2: against 1f1b_p4_m8: Changed most: stage 1 B")
    res = invoke("explain", tmp_path / "tb", "--window", "all")
    assert res.exit_code == 0 and res.stdout.count("top cause") == 2
    res = invoke("export", tmp_path / "tb", "--window", "all", "--perfetto", tmp_path / "o.json")
    assert res.exit_code == 0, res.output
    assert (tmp_path / "o.step_0_cycle_1.json").is_file()
    assert (tmp_path / "o.step_0_cycle_2.json").is_file()


def test_bad_window_label_is_one_line(tmp_path):
    _torch_names(tmp_path / "tb", [BASE, SLOW])
    res = invoke("analyze", tmp_path / "tb", "--window", "step_9")
    assert res.exit_code == 2 and res.stderr.count("\n") == 1
    assert "holds no such window; its windows: step 0 cycle 1, step 0 cycle 2" in res.stderr
    res = invoke("analyze", tmp_path / "tb", "--window", "all", "--html", tmp_path / "r.html")
    assert res.exit_code == 2 and "--window all" in res.stderr


def test_watch_names_a_plain_folder_by_its_name(tmp_path):
    run = tmp_path / "run_a"
    run.mkdir()
    for r in range(4):
        shutil.copy(BASE / f"rank{r}.json.gz", run / f"rank{r}.json.gz")
    watched, _ = _json("watch", run, "--once")
    assert [w["label"] for w in watched["windows"]] == ["run_a"]
