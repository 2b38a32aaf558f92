"""Markdown reports escape everything that came from the inputs: a manifest's schedule, event
names, file and directory names cannot add HTML or markup to a report meant for a PR comment.
The reports are rendered by a real CommonMark renderer (markdown-it-py, which rich brings)
with raw HTML allowed, and no tag from the inputs may come out of it."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from pipeaudit.report.markdown import md_code, md_fence, md_text
from tests.support.paths import SAMPLES
from tests.support.cli import invoke

markdown_it = pytest.importorskip("markdown_it")

SAMPLE = SAMPLES / "1f1b_p2_m4"
SCRIPT = "</script><script>alert(1)</script>"
IMG = "<img src=x onerror=alert(1)>"


def _render(md: str) -> str:
    return markdown_it.MarkdownIt("commonmark", {"html": True}).enable("table").render(md)


def _assert_inert(md: str) -> None:
    html = _render(md)
    for tag in ("<script", "</script", "<img", "<a href"):
        assert tag not in html, (tag, [ln for ln in md.splitlines() if "script" in ln or "img" in ln])


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory) -> Path:
    """A real run whose manifest names a hostile schedule, whose rank 1 file name and whose
    event name (an X event without dur, so that a note quotes it) carry HTML, in a
    directory whose name has backticks."""
    d = tmp_path_factory.mktemp("md") / "run `x` [y](javascript:z)"
    shutil.copytree(SAMPLE, d)
    manifest = json.loads((d / "manifest.json").read_text())
    manifest["schedule"] = SCRIPT
    (d / "manifest.json").write_text(json.dumps(manifest))
    doc = json.loads(gzip.decompress((d / "rank1.json.gz").read_bytes()))
    doc["traceEvents"].append({"ph": "X", "cat": "cpu_op", "name": SCRIPT + IMG, "pid": 1, "tid": 1,
                               "ts": doc["traceEvents"][-1]["ts"]})
    (d / "rank1.json.gz").unlink()
    (d / f"rank1 {IMG}.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))
    return d


def test_helpers_escape_what_renders():
    md = "\n\n".join([md_text(SCRIPT + IMG + " [a](javascript:b) *c* | d"), md_code("a ``b`` c"),
                      "\n".join(md_fence("```\n" + SCRIPT + "\n```"))])
    html = _render(md)
    assert "<script" not in html and "<img" not in html and "<a " not in html and "<em>" not in html
    assert "&lt;/script&gt;&lt;script&gt;" in html and "[a](javascript:b)" in html
    assert "<code>a ``b`` c</code>" in html
    assert md_text("a\nb") == "a b"


@pytest.mark.parametrize("command", [["analyze"], ["explain"]])
def test_reports_of_a_hostile_run_are_inert(hostile_run, command):
    res = invoke(*command, str(hostile_run), "--format", "markdown")
    assert res.exit_code == 0, res.output
    md = res.stdout
    if command == ["analyze"]:  # the inputs are there, as text
        assert md_text(SCRIPT) in md and "&lt;img src=x onerror=alert(1)&gt;" in _render(md)
    _assert_inert(md)


def test_diff_of_hostile_paths_is_inert(hostile_run):
    res = invoke("diff", str(hostile_run), str(hostile_run), "--format", "markdown")
    assert res.exit_code in (0, 1), res.output
    _assert_inert(res.stdout)
    assert "run `x` [y](javascript:z)" in _render(res.stdout)  # the path, shown as code
