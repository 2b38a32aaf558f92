"""A newcomer's first hour, walked as one would: the README's commands, a run without a
pipeline through every command, the extras missing from a fresh install, a gate and a diff
of the same two real runs, and a one-process run. Each case checks its exact line(s) and
exit code.
"""

from __future__ import annotations

import gzip
import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.cli import invoke
from tests.support.child import repo_env
from tests.support.paths import DATA, REPO, SAMPLES

PLAIN = DATA / "plain_loop"  # a real trace of a training loop without a pipeline
HINT = ("if the run names its forward/backward spans its own way, give --action-pattern REGEX "
        "(docs/profiling-your-own-training.md)")


def no_pipeline_line(level: str, path: Path | str) -> str:
    return (f"pipeaudit: {level}: {path}: no pipeline stages found: 1 trace, no PP: or "
            f"Forward/Backward spans, no send/recv between ranks; {HINT}\n")


# ------------------------------------------------------------------------- README commands


def readme_commands() -> list[str]:
    """Every ``pipeaudit ...`` line of the README's quick start and picture/CI blocks."""
    text = (REPO / "README.md").read_text()
    quick = re.search(r"&& (pipeaudit analyze sample_traces/\S+)\n", text).group(1)
    block = re.search(r"## Pictures, post-mortems and CI\n\n```bash\n(.*?)```", text, re.S).group(1)
    lines = [line.split("#")[0].strip() for line in block.splitlines()]
    return [quick] + [line for line in lines if line.startswith("pipeaudit ")]


@pytest.fixture(scope="module")
def readme_dir(tmp_path_factory) -> Path:
    """Where the newcomer runs the README's commands: the bundled traces beside them."""
    d = tmp_path_factory.mktemp("readme")
    (d / "sample_traces").symlink_to(SAMPLES)
    return d


def test_readme_commands(readme_dir, monkeypatch):
    monkeypatch.chdir(readme_dir)
    monkeypatch.setenv("COLUMNS", "120")
    commands = readme_commands()
    assert len(commands) == 8, commands
    results = {}
    for cmd in commands:
        argv = shlex.split(cmd)[1:]
        results[argv[0] + (" --html" if "--html" in argv else "")] = invoke(*argv)
    report = results["analyze"]
    assert report.exit_code == 0 and report.stderr == ""
    lines = report.stdout.splitlines()
    # one screen: summary, timeline, the top findings
    assert len(lines) <= 50 and max(map(len, lines)) <= 120, (len(lines), max(map(len, lines)))
    assert lines[1] == ("schedule 1f1b (from manifest); P=4 ranks, 4 stages (v=1), M=8 "
                        "microbatches, 2 step(s), device cpu")
    assert "ERROR   STAGE_IMBALANCE rank 1 stage 1 (measured 1.99x, expected 1.00x)" in lines
    assert lines[-1] == ("--verbose adds stage and rank tables, the published formulas; "
                         "--html FILE writes it all as a page")
    html = results["analyze --html"]
    assert (html.exit_code, html.stderr) == (0, "wrote report.html\n")
    assert (readme_dir / "report.html").stat().st_size > 10_000
    export = results["export"]
    ev = json.loads(gzip.decompress((readme_dir / "run.json.gz").read_bytes()))["traceEvents"]
    n = {c: sum(1 for e in ev if e.get("ph") == "X" and e.get("cat") in c) for c in ("FBIW", "wait")}
    assert export.exit_code == 0
    assert export.stderr.startswith(f"wrote run.json.gz: 4 ranks, {n['FBIW']} actions, "
                                    f"{n['wait']} waits inside them, ")
    assert (results["plot"].exit_code, results["plot"].stderr) == (0, "wrote timeline.png\n")
    for name in ("explain", "whatif"):
        assert results[name].exit_code == 0 and results[name].stderr == "", results[name].output
    # which stage held the step back: the top cause is stage 1's backward
    assert re.search(r"^ *1 +1 +B +", results["explain"].stdout, re.M), results["explain"].stdout
    base = results["baseline"]
    assert base.exit_code == 0 and base.stderr == (
        "pipeaudit: wrote baseline baseline.json: 1f1b P=4 stages=4 M=8 v=1 world=4, 2 step(s)\n"
        "pipeaudit: warning: the run has 2 step(s); with 3 or more (profile --steps 5) one slow "
        "step cannot fail the gate\n")
    gate = results["gate"]
    assert gate.exit_code == 1  # the README: "exit 1: stage 1 got heavier"
    assert re.search(r"^  FAIL  stage 1 compute per step \+95\.7% \(F \+82%, B \+102%\): stage 1 "
                     r"got heavier \(193\.01 ms -> 377\.75 ms per step", gate.stdout, re.M)


# ------------------------------------------------------------------ a run without a pipeline

STOPS = {
    "export": ["--perfetto", "{tmp}/out.json"],
    "baseline": ["-o", "{tmp}/b.json"],
    "gate": ["--max-bubble", "0.5"],
    "diff": ["{plain}"],
    "explain": [],
    "whatif": ["--scale", "0=0.5"],
    "advise": [],
    "plot": ["-o", "{tmp}/t.png"],
}


@pytest.mark.parametrize("command", sorted(STOPS))
def test_a_run_without_a_pipeline_stops_every_command_that_needs_one(command, tmp_path):
    args = [a.format(tmp=tmp_path, plain=PLAIN) for a in STOPS[command]]
    res = invoke(command, PLAIN, *args)
    assert (res.exit_code, res.stdout, res.stderr) == (2, "", no_pipeline_line("error", PLAIN))
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_analyze_says_the_same_and_goes_on(monkeypatch):
    """analyze's per-rank figures stand without a pipeline: the same line, as a note."""
    monkeypatch.setenv("COLUMNS", "120")
    res = invoke("analyze", PLAIN)
    assert res.exit_code == 0 and res.stderr == no_pipeline_line("note", PLAIN)
    lines = res.stdout.splitlines()
    assert lines[1] == ("1 rank(s), device cpu: no pipeline actions found; per-rank "
                        "busy/idle/communication below.")
    assert "INFO    NO_PIPELINE" in lines
    assert "distributedInfo" not in res.stdout  # one trace: rank 0 is no news
    doc = json.loads(invoke("analyze", PLAIN, "--format", "json").stdout)
    assert [f["code"] for f in doc["findings"]] == ["NO_PIPELINE"]


# --------------------------------------------------------------- a fresh install, no extras


@pytest.fixture(scope="module")
def core_python(tmp_path_factory) -> Path:
    """A fresh install without extras; matplotlib, a core dependency, removed from it as a
    user might (``pip uninstall matplotlib``), for plot's line."""
    from tests.support.venv import make_core_venv

    py = make_core_venv(tmp_path_factory.mktemp("core-venv") / "venv", leave_out=("matplotlib",))
    for module in ("torch", "matplotlib", "hta", "deepspeed"):
        probe = subprocess.run([str(py), "-c", f"import {module}"], capture_output=True)
        assert probe.returncode != 0, f"{module} is importable in the core venv"
    return py


MISSING = [
    (["profile", "--schedule", "1f1b", "-P", "2", "-M", "4", "--out", "{tmp}/run"],
     "profile needs PyTorch, which is not installed: pip install 'pipeaudit[harness]'"),
    (["profile", "--framework", "deepspeed", "--schedule", "1f1b", "-P", "2", "-M", "4",
      "--out", "{tmp}/run"],
     "profile --framework deepspeed needs PyTorch, which is not installed: "
     "pip install 'pipeaudit[deepspeed]'"),
    (["sweep", "--schedules", "1f1b", "-P", "2", "-M", "4", "--out", "{tmp}/sweep"],
     "sweep needs PyTorch, which is not installed: pip install 'pipeaudit[harness]'"),
    (["advise", "{samples}/1f1b_p2_m4", "--verify", "1", "--out", "{tmp}/reruns"],
     "advise --verify needs PyTorch, which is not installed: pip install 'pipeaudit[harness]'"),
    (["plot", "{samples}/1f1b_p2_m4", "-o", "{tmp}/t.png"],
     "plot needs matplotlib, which is not installed: pip install 'pipeaudit[plot]'"),
    (["analyze", "{samples}/1f1b_p2_m4", "--with-hta"],
     "analyze --with-hta needs Holistic Trace Analysis (traceinsight), which is not installed: "
     "pip install 'pipeaudit[hta]'"),
]


@pytest.mark.slow
def test_missing_extras_in_a_fresh_install(core_python, tmp_path):
    env = repo_env()
    env.pop("PYTHONHOME", None)
    ok = subprocess.run([str(core_python), "-m", "pipeaudit", "analyze", str(SAMPLES / "1f1b_p2_m4")],
                        capture_output=True, text=True, env=env, timeout=300)
    assert ok.returncode == 0 and ok.stderr == "", ok.stderr  # the core works without extras
    for argv, line in MISSING:
        args = [a.format(tmp=tmp_path, samples=SAMPLES) for a in argv]
        proc = subprocess.run([str(core_python), "-m", "pipeaudit", *args], capture_output=True,
                              text=True, env=env, timeout=300)
        assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", f"pipeaudit: error: {line}\n"), args
    assert list(tmp_path.iterdir()) == []  # no work started: no run, sweep or rerun folder


@pytest.mark.slow
def test_plot_runs_on_the_core_install(tmp_path_factory, tmp_path):
    """The README's Pictures block on the Quick start's install: matplotlib comes with the core
    dependencies, so `pipeaudit plot` writes its picture without any extra."""
    from tests.support.venv import core_requirements, make_core_venv

    assert "matplotlib" in core_requirements()
    py = make_core_venv(tmp_path_factory.mktemp("core-plot") / "venv")
    env = repo_env()
    env.pop("PYTHONHOME", None)
    proc = subprocess.run([str(py), "-m", "pipeaudit", "plot", str(SAMPLES / "1f1b_p4_m8_imb_s1x3"),
                           "-o", "timeline.png"], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=300)
    assert (proc.returncode, proc.stderr) == (0, "wrote timeline.png\n")
    assert (tmp_path / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ---------------------------------------------------------------- gate and diff, same numbers


def test_gate_and_diff_of_two_real_runs_agree(tmp_path):
    """Stage 1 made 3x heavier (1f1b_p4_m8 -> 1f1b_p4_m8_imb_s1x3): both name stage 1 with
    the same medians; the gate says first that a 2-step baseline cannot tell noise from change
    for the checks whose warnings its noise decided, and asks for 5 steps."""
    base = tmp_path / "base.json"
    assert invoke("baseline", SAMPLES / "1f1b_p4_m8", "-o", base).exit_code == 0
    gate = invoke("gate", SAMPLES / "1f1b_p4_m8_imb_s1x3", "--baseline", base)
    assert gate.exit_code == 1
    first = gate.stdout.split("\npipeaudit gate")[0]  # one paragraph, wrapped with a hanging indent
    assert " ".join(line.strip() for line in first.splitlines()) == (
        "pipeaudit: a baseline of 2 step(s) cannot tell noise from change: 2 checks above the "
        "threshold stayed inside its noise band (pipeline step time, rank 2 bubble); profile 5 "
        "steps or more for the baseline and the run (profile --steps 5)")
    doc = json.loads(invoke("gate", SAMPLES / "1f1b_p4_m8_imb_s1x3", "--baseline", base,
                            "--format", "json").stdout)
    failed = {(c["metric"], c["index"]) for c in doc["checks"] if c["verdict"] == "fail"}
    assert ("stage_compute", 1) in failed
    assert not {("stage_compute", s) for s in (0, 2, 3)} & failed
    stage1 = next(c for c in doc["checks"] if (c["metric"], c["index"]) == ("stage_compute", 1))
    diff = invoke("diff", SAMPLES / "1f1b_p4_m8", SAMPLES / "1f1b_p4_m8_imb_s1x3")
    assert diff.exit_code == 0 and diff.stderr == ""
    row = next(line for line in diff.stdout.splitlines() if line.startswith("1 "))
    assert f"{stage1['baseline'] / 1000:.2f} -> {stage1['now'] / 1000:.2f}" in row  # 193.01 -> 377.75
    assert "+95.7%" in row and "+95.7%" in gate.stdout
    assert diff.stdout.split("\n\n")[-1].startswith("Changed most: stage 1 B compute 132.82 ms -> "
                                                     "268.22 ms per step")


# ------------------------------------------------------------------------- one process


@pytest.mark.parametrize("run, header", [
    ("single_gpipe_p2_m4", "schedule gpipe (from manifest); one process, 2 stages (v=1), M=4 "
                           "microbatches, 2 step(s), device cpu"),
    ("user_loop_cuda_1f1b_p4_m8", "schedule delayed-backward (detected from order); one process, "
                                  "4 stages (v=1), M=8 microbatches, 2 step(s), device cuda"),
])
def test_a_one_process_run_is_told_as_one(run, header):
    res = invoke("analyze", SAMPLES / run, "--verbose")
    assert res.exit_code == 0 and res.stderr == ""
    lines = res.stdout.splitlines()
    assert lines[1] == header
    assert "P=" not in res.stdout and "distributedInfo" not in res.stdout
    assert "assuming rank 0" not in res.stdout
    rows = [line for line in lines if re.match(r"^(stage|rank) \d+ +\|", line)]
    assert rows and all(line.startswith("stage ") for line in rows)  # a line per stage
    assert not re.search(r"^(ERROR|WARNING|INFO) +\w+ rank ", res.stdout, re.M)  # findings: stages


def test_advise_names_its_own_flag_and_the_file(tmp_path):
    """A run whose order matches no schedule: advise names the run and --run-schedule, the
    flag it has (its --schedules lists candidates; the run's own is --run-schedule)."""
    from tests.support.builders import build_run

    odd = [[(s, "F", 0), (s, "B", 0), (s, "F", 1), (s, "F", 2), (s, "B", 1), (s, "B", 2)]
           for s in range(2)]
    built = build_run(tmp_path, odd, steps=2)
    res = invoke("advise", built.directory)
    assert (res.exit_code, res.stdout) == (2, "")
    assert res.stderr == (f"pipeaudit: error: {built.directory}: the run's schedule was not "
                          "recognised: advise predicts from a run whose schedule it knows; "
                          "declare the one that ran with --run-schedule NAME\n")
    assert "--run-schedule NAME" in invoke("advise", "--help").stdout


# ------------------------------------------------------- outputs: overwritten, inputs never

P2 = SAMPLES / "1f1b_p2_m4"


def test_readme_commands_run_twice(tmp_path, monkeypatch):
    """Every README command run a second time over its own outputs: the same exit code (gate:
    1, the regression it shows), no error line."""
    (tmp_path / "sample_traces").symlink_to(SAMPLES)
    monkeypatch.chdir(tmp_path)
    for cmd in readme_commands():
        argv = shlex.split(cmd)[1:]
        first, second = invoke(*argv), invoke(*argv)
        expected = 1 if argv[0] == "gate" else 0
        assert (first.exit_code, second.exit_code) == (expected, expected), (cmd, second.stderr)
        assert "error" not in second.stderr, (cmd, second.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "baseline.json", "report.html", "run.json.gz", "sample_traces", "timeline.png"]


def test_two_outputs_of_one_path_are_refused_before_anything_is_written(tmp_path):
    out = tmp_path / "X"
    res = invoke("analyze", P2, "-o", out, "--html", out)
    assert (res.exit_code, res.stdout) == (2, "")
    assert res.stderr == (f"pipeaudit: error: {out}: named for both -o and --html; give each "
                          "output its own file\n")
    assert list(tmp_path.iterdir()) == []  # not the HTML either


def test_an_output_never_overwrites_an_input(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(P2, run)
    trace = run / "rank0.json.gz"
    before = trace.read_bytes()
    res = invoke("export", run, "--perfetto", trace)
    assert (res.exit_code, res.stdout) == (2, "")
    assert res.stderr == (f"pipeaudit: error: {trace}: is an input of this command: name another "
                          "file for --perfetto (an input is never overwritten)\n")
    assert trace.read_bytes() == before
    base = tmp_path / "base.json"
    assert invoke("baseline", run, "-o", base).exit_code == 0
    res = invoke("gate", run, "--baseline", base, "-o", base)
    assert (res.exit_code, res.stderr) == (2, f"pipeaudit: error: {base}: is an input of this "
                                              "command: name another file for -o (an input is "
                                              "never overwritten)\n")


def test_force_is_accepted_and_changes_nothing(tmp_path):
    out = tmp_path / "r.json"
    out.write_text("old")
    for extra in ([], ["--force"]):
        res = invoke("analyze", P2, "--format", "json", "-o", out, *extra)
        assert (res.exit_code, res.stderr) == (0, "")
        assert json.loads(out.read_text())["num_microbatches"] == 4
    assert ("Accepted for old scripts; changes nothing: an output file is always overwritten"
            in " ".join(invoke("analyze", "--help").stdout.split()))


# ------------------------------------------------------------ messages that name the thing


def test_a_json_gz_that_is_not_gzip_says_so(tmp_path):
    bad = tmp_path / "rank0.json.gz"
    bad.write_text("hello, I am not gzip")
    res = invoke("analyze", bad)
    assert (res.exit_code, res.stdout) == (2, "")
    assert res.stderr == (f"pipeaudit: error: {bad}: not gzip: the name ends in .gz, but the file "
                          "is neither gzip nor JSON (it starts with 'hello, I am not gzip')\n")


def test_one_ranks_file_of_a_larger_run_is_called_so():
    res = invoke("analyze", P2 / "rank0.json.gz", "--salvage")
    assert (res.exit_code, res.stderr) == (0, "")
    lines = res.stdout.splitlines()
    assert lines[1] == ("schedule 1f1b (from manifest); rank 0's trace of P=2 ranks, 2 stages "
                        "(v=1), M=4 microbatches, 2 step(s), device cpu")
    assert lines[2] == "ranks present: rank 0 of 2 (missing rank 1): figures of the ranks present only"
    assert "one process" not in res.stdout


def test_steps_and_microbatches_the_traces_override_are_named():
    res = invoke("analyze", P2, "--steps", "3", "--microbatches", "5")
    assert res.exit_code == 0
    assert res.stderr == ("pipeaudit: note: the traces show 2 step(s) of M=4 microbatches (steps "
                          "from ProfilerStep spans), which are used: --steps 3 and --microbatches "
                          "5 were not (they are for traces that show neither)\n")
    assert invoke("analyze", P2, "--steps", "2", "--microbatches", "4").stderr == ""  # they agree


def test_watch_on_a_folder_without_windows_is_an_input_error(tmp_path):
    res = invoke("watch", tmp_path, "--once")
    assert (res.exit_code, res.stdout) == (2, "")
    assert res.stderr == (f"pipeaudit: error: {tmp_path}: no profiled window found (no trace files "
                          "in this folder or below)\n")


def test_a_folder_of_unreadable_traces_names_every_one(tmp_path):
    """No file of the folder is a trace: each trace-named one is named with why, not just
    'no trace files'."""
    run = tmp_path / "run"
    run.mkdir()
    for name in ("rank0.json.gz", "rank1.json.gz"):
        (run / name).write_text("not gzip at all")
    (run / "rank2.json.gz").write_bytes(b"")
    (run / "config.json").write_text('{"lr": 0.1}')
    res = invoke("analyze", run)
    assert (res.exit_code, res.stdout) == (2, "")
    assert res.stderr == (
        f"pipeaudit: error: {run}: no trace files in this directory or below (looked for *.json "
        "and *.json.gz files holding a Chrome/Kineto trace); not taken: config.json (JSON, but no "
        "traceEvents in its first 64 KiB); rank0.json.gz, rank1.json.gz (not gzip, nor JSON); "
        "rank2.json.gz (empty file)\n")


# ------------------------------------------------------ STAGE_IMBALANCE names pipeaudit advise


def test_stage_imbalance_names_advise_with_the_split_and_its_gain():
    """A run whose manifest gives 2 layers a stage (Megatron-core, stage 1 three times
    heavier): the finding names the split advise proposes and its predicted gain."""
    res = invoke("analyze", SAMPLES / "megatron_1f1b_p4_m4_imb_s1x3", "--format", "json")
    assert res.exit_code == 0
    (imb,) = [f for f in json.loads(res.stdout)["findings"] if f["code"] == "STAGE_IMBALANCE"]
    assert imb["message"] == (
        "Stage 1 computes 195.13 ms per step, 2.30x the median stage (84.73 ms): every other stage "
        "waits for it; `pipeaudit advise` proposes the layers 3,1,1,3 per stage (the run's: "
        "2,2,2,2), predicted 15.1% faster (284.4 ms per step against 334.9 ms replayed for the "
        "run's split).")
    assert "whatif --scale" not in imb["message"]
