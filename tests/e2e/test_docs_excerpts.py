"""The report excerpts in README.md and docs/getting-started.md are what `pipeaudit analyze`
prints for the bundled run they name: every line shown, in order ("..." skips lines)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.paths import REPO
from tests.support.cli import invoke

COMMAND = ["analyze", "sample_traces/1f1b_p4_m8_imb_s1x3"]


def excerpts(doc: Path) -> list[list[str]]:
    """The fenced blocks of ``doc`` that show the report (they hold its bubble table)."""
    blocks: list[list[str]] = []
    current: list[str] | None = None
    for line in doc.read_text().splitlines():
        if line.startswith("```"):
            if current is None:
                current = []
            else:
                blocks.append(current)
                current = None
        elif current is not None:
            current.append(line)
    return [b for b in blocks if any(line.startswith("Pipeline bubble (fraction") for line in b)]


@pytest.fixture(scope="module")
def report() -> list[str]:
    import os

    cwd = os.getcwd()
    os.chdir(REPO)  # the docs show the command run from the repository's root
    try:
        res = invoke(*COMMAND, catch_exceptions=False)
    finally:
        os.chdir(cwd)
    assert res.exit_code == 0, res.output
    return [line.rstrip() for line in res.output.splitlines()]


@pytest.mark.parametrize("doc", ["README.md", "docs/getting-started.md"])
def test_excerpt_is_the_real_report(doc, report):
    blocks = excerpts(REPO / doc)
    assert blocks, f"{doc}: no report excerpt found"
    for block in blocks:
        at = 0
        for line in block:
            if line.strip() == "...":
                continue
            try:
                at = report.index(line.rstrip(), at) + 1
            except ValueError:
                pytest.fail(f"{doc}: {line!r} is not in the report (after line {at}):\n"
                            + "\n".join(report))
