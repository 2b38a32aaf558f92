"""`pipeaudit plot`: PNG and SVG files that are really images of the run."""

from __future__ import annotations

import re
import struct
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import polars as pl
import pytest

import pipeaudit
from pipeaudit.errors import ConfigError
from pipeaudit.report import plots
from pipeaudit.report.step_view import median_step
from tests.support.paths import SAMPLES
from tests.support.cli import invoke

pytest.importorskip("matplotlib")

IMB = SAMPLES / "1f1b_p4_m8_imb_s1x3"
MEMORY = SAMPLES / "1f1b_p2_m4_memory"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, "not a PNG"
    assert data[12:16] == b"IHDR"
    assert data.rstrip(b"\x00").endswith(b"IEND\xaeB`\x82"), "truncated PNG"
    return struct.unpack(">II", data[16:24])


def svg_root(path: Path) -> ET.Element:
    root = ET.parse(path).getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    return root


def svg_text(path: Path) -> str:
    return " ".join(t.text or "" for t in svg_root(path).iter("{http://www.w3.org/2000/svg}text"))


@pytest.fixture(scope="module")
def imb():
    run = pipeaudit.load(IMB)
    return run, run.audit()


@pytest.mark.parametrize("kind", ["timeline", "bubble", "inflight"])
def test_png_and_svg_of_each_kind(imb, tmp_path, kind):
    run, result = imb
    png, svg = tmp_path / f"{kind}.png", tmp_path / f"{kind}.svg"
    plots.save_plot(kind, run.timeline, result, str(png))
    plots.save_plot(kind, run.timeline, result, str(svg))
    w, h = png_size(png)
    assert w >= 600 and h >= 300
    text = svg_text(svg)
    if kind == "timeline":
        for r in range(4):
            assert f"rank {r}" in text
        # boxes labelled with their microbatch (kind too where the box is wide enough)
        assert "B0" in text and "B7" in text and re.search(r"\bF\d\b", text)
    elif kind == "bubble":
        assert "measured" in text and "theory" in text and "replay ideal" in text
    else:
        assert all(f"stage {s}" in text for s in range(4))


def test_memory_plot(tmp_path):
    run = pipeaudit.load(MEMORY)
    out = tmp_path / "memory.svg"
    plots.save_plot("memory", run.timeline, run.audit(), str(out))
    text = svg_text(out)
    assert "rank 0" in text and "rank 1" in text and "MiB" in text
    peaks = {r.rank: r.peak_allocated_bytes / 2**20 for r in run.audit().ranks}
    assert f"peak {peaks[0]:.1f} MiB" in text


def test_timeline_figure_draws_every_action_of_the_step(imb):
    run, result = imb
    k = median_step(result)
    fig = plots.timeline_figure(run.timeline, result)
    ax = fig.axes[0]
    n = run.actions().filter(pl.col("step") == k).height
    ranks = 4
    # one bar collection per rank background, per measured action and per ideal action
    assert len(ax.collections) == ranks + 2 * n
    fig_no_ideal = plots.timeline_figure(run.timeline, result, ideal=False, step=1)
    assert len(fig_no_ideal.axes[0].collections) == ranks + run.actions().filter(pl.col("step") == 1).height
    with pytest.raises(ConfigError, match="no step 9"):
        plots.timeline_figure(run.timeline, result, step=9)


def test_plot_cli(tmp_path):
    out = tmp_path / "t.png"
    res = invoke("plot", str(IMB), "-o", str(out))
    assert res.exit_code == 0, res.output
    png_size(out)
    out.write_bytes(b"old")
    res = invoke("plot", str(IMB), "-o", str(out))  # overwritten, as cp does
    assert res.exit_code == 0, res.output
    png_size(out)
    res = invoke("plot", str(IMB), "-o", str(tmp_path / "t.jpg"))
    assert res.exit_code == 2 and "use .png or .svg" in res.output
    res = invoke("plot", str(IMB), "-o", str(tmp_path / "m.png"), "--kind", "memory")
    assert res.exit_code == 2 and "no [memory] samples" in res.output
    assert "Traceback" not in res.output and not (tmp_path / "m.png").exists()
    res = invoke("plot", str(IMB), "-o", str(tmp_path / "b.svg"), "--kind", "bubble")
    assert res.exit_code == 0
    svg_root(tmp_path / "b.svg")


def test_without_matplotlib_the_error_says_what_to_install(imb, tmp_path, monkeypatch):
    run, result = imb
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ConfigError, match=r"pipeaudit\[plot\]"):
        plots.save_plot("bubble", run.timeline, result, str(tmp_path / "x.png"))
