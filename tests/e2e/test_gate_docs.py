"""docs/ci.md stays true: its workflow parses, its commands use existing options, its
TOML table is accepted."""

from __future__ import annotations

import shlex

import pytest

from pipeaudit.cli.main import cli
from pipeaudit.gate.thresholds import Thresholds, load_thresholds
from tests.support.paths import DOCS

DOC = DOCS / "ci.md"


def blocks(lang: str) -> list[str]:
    """The fenced code blocks of the page labelled ``lang`` ("" for unlabelled ones)."""
    out, current, label = [], None, None
    for line in DOC.read_text().splitlines():
        if line.startswith("```"):
            if current is None:
                current, label = [], line[3:].strip()
            else:
                if label == lang:
                    out.append("\n".join(current) + "\n")
                current = None
        elif current is not None:
            current.append(line)
    return out


def commands() -> list[list[str]]:
    out = []
    for block in blocks("yaml") + blocks(""):
        for line in block.splitlines():
            line = line.strip().removeprefix("run: ")
            if line.startswith("pipeaudit "):
                out.append(shlex.split(line, comments=True)[1:])
    return out


def test_workflow_is_valid_yaml_with_upload():
    yaml = pytest.importorskip("yaml")
    (text,) = blocks("yaml")
    wf = yaml.safe_load(text)
    steps = wf["jobs"]["pipeaudit"]["steps"]
    uses = [s.get("uses", "") for s in steps]
    assert any(u.startswith("actions/upload-artifact@") for u in uses)
    runs = " ".join(s.get("run", "") for s in steps)
    assert "pipeaudit profile" in runs and "--format github" in runs


def test_every_documented_command_parses():
    cmds = commands()
    assert {c[0] for c in cmds} >= {"profile", "baseline", "gate", "diff"}
    for argv in cmds:
        cmd = cli.get_command(None, argv[0])
        assert cmd is not None, argv
        cmd.make_context(argv[0], argv[1:])  # raises on an unknown option or bad value


def test_documented_toml_table_is_accepted(tmp_path):
    (toml,) = blocks("toml")
    f = tmp_path / "pyproject.toml"
    f.write_text(toml)
    th, _ = load_thresholds(config=str(f))
    assert th != Thresholds() and th.max_peak_memory_increase is None
