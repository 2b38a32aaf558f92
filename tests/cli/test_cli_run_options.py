"""Every command that reads a run takes the same options and fails the same way."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pipeaudit.options import LoadOptions, OptionError
from tests.support.paths import SAMPLES
from tests.support.cli import invoke
from tests.support.child import run_python

SAMPLE = SAMPLES / "1f1b_p2_m4"


def _argv(command: str, tmp_path: Path) -> list[str]:
    run = str(SAMPLE)
    return {
        "analyze": ["analyze", run],
        "explain": ["explain", run],
        "whatif": ["whatif", run, "--scale", "0=0.5"],
        "baseline": ["baseline", run, "-o", str(tmp_path / "b.json")],
        "gate": ["gate", run, "--max-bubble", "0.99", "--no-config"],
        "diff": ["diff", run, run],
        "export": ["export", run, "--perfetto", str(tmp_path / "p.json")],
        "plot": ["plot", run, "-o", str(tmp_path / "p.png")],
    }[command]


COMMANDS = ["analyze", "explain", "whatif", "baseline", "gate", "diff", "export", "plot"]


def _invoke(args):
    res = invoke(*args, standalone_mode=True)
    return res.exit_code, res.output


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("bad", [["--jobs", "0"], ["--steps", "0"], ["--microbatches", "-1"],
                                 ["--layout", "pp=two"], ["--max-memory", "lots"],
                                 ["--executor", "mpi://x"], ["--action-pattern", "("]])
def test_a_bad_run_option_is_one_usage_line(tmp_path, command, bad):
    code, out = _invoke(_argv(command, tmp_path) + bad)
    assert code == 2, out
    lines = out.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pipeaudit: error:"), out
    assert bad[0] in lines[0]


def test_a_bad_run_option_through_the_console(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pipeaudit", "explain", str(SAMPLE), "--jobs", "0"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1 and "--jobs" in proc.stderr


@pytest.mark.parametrize("command", ["analyze", "explain", "baseline", "gate", "diff", "export"])
def test_an_unknown_schedule_lists_the_known_ones(tmp_path, command):
    code, out = _invoke(_argv(command, tmp_path) + ["--schedule", "one-f-one-b"])
    assert code == 2
    assert "unknown schedule 'one-f-one-b'" in out and "1f1b" in out
    assert len(out.strip().splitlines()) == 1


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_takes_salvage_and_the_new_options(tmp_path, command):
    code, out = _invoke(_argv(command, tmp_path) + ["--salvage", "--steps", "2",
                                                    "--layout", "pp=2", "--allow-missing"])
    assert code == 0, out


def test_missing_optional_dependency_is_exit_2_with_the_install_line(tmp_path):
    code = ("import sys; sys.modules['matplotlib'] = None\n"
            "from pipeaudit.cli.main import main\n"
            f"main(['plot', {str(SAMPLE)!r}, '-o', {str(tmp_path / 'p.png')!r}])")
    proc = run_python(code)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == ("pipeaudit: error: plot needs matplotlib, which is not "
                                   "installed: pip install 'pipeaudit[plot]'")


def test_load_options_speak_of_the_api_names():
    with pytest.raises(OptionError, match=r"^num_steps: must be an integer >= 1, got 0$"):
        LoadOptions(num_steps=0)
    with pytest.raises(OptionError, match="^schedule: unknown schedule"):
        LoadOptions(schedule="one-f-one-b")
    assert LoadOptions(max_memory="1G").max_memory == 1 << 30
    opts = LoadOptions(jobs=2)
    with pytest.raises(Exception):
        opts.jobs = 3  # frozen
    assert opts.with_changes(jobs=1).jobs == 1
