"""`pipeaudit analyze --html`: a self-contained page that really renders in a headless browser.

The page's script sets ``data-rendered="ok"`` on <body> after drawing and records any script
error in ``data-error``; Chromium's ``--dump-dom`` prints the DOM after the scripts ran, so
the dumped DOM proves the charts were drawn. Without Chromium the browser tests are skipped
outside CI and fail in CI (``CI`` set): install it with ``apt-get install -y chromium``.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

import pipeaudit
from pipeaudit.report.html import render_html, report_data
from pipeaudit.report.step_view import median_step
from tests.support.child import repo_env
from tests.support.paths import SAMPLES
from tests.support.cli import invoke

IMB = SAMPLES / "1f1b_p4_m8_imb_s1x3"
MEMORY = SAMPLES / "1f1b_p2_m4_memory"
ZBV = SAMPLES / "zbv_p4_m8"
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def _browser() -> str:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    if os.environ.get("CI"):
        pytest.fail("CI must run the HTML report in a real browser: apt-get install -y chromium")
    pytest.skip("no chromium on this machine (apt-get install -y chromium)")


def dump_dom(page: Path, tmp_path: Path) -> tuple[str, str]:
    """(DOM after the page's scripts ran, the browser's log with console messages)."""
    browser = _browser()
    profile = tmp_path / "chromium-profile"
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--enable-logging=stderr",
           "--v=0", "--virtual-time-budget=5000", "--dump-dom", page.resolve().as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout, proc.stderr


def page_error(dom: str) -> str | None:
    """The script error the page recorded on <html> or <body>, if any."""
    m = re.search(r'<(?:html|body)\b[^>]*\bdata-error="([^"]*)"', dom)
    return m.group(1) if m else None


def svg(dom: str, ident: str) -> str:
    """The drawn <svg id=...> element (not the script text that builds it)."""
    m = re.search(rf'<svg id="{ident}".*?</svg>', dom, re.S)
    assert m, f"no {ident} in the rendered page"
    return m.group(0)


def console_errors(log: str) -> list[str]:
    return [line for line in log.splitlines() if "CONSOLE" in line and
            ("Uncaught" in line or "Error" in line)]


@pytest.fixture(scope="module")
def imb():
    run = pipeaudit.load(IMB)
    return run, run.audit()


def test_page_is_self_contained(imb):
    run, result = imb
    page = render_html(run.timeline, result)
    assert len(page.encode()) < 1_000_000
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page, re.I)
    assert not re.search(r"<link\b|@import|<script[^>]+\bsrc\s*=", page, re.I)
    assert "http://" not in page and "https://" not in page
    for section in ("Findings", "Timeline of one step", "Bubble per rank", "Stages",
                    "In-flight microbatches per stage", "Memory over time per rank"):
        assert section in page
    assert "STAGE_IMBALANCE" in page and "(P-1)/(M+P-1)" in page
    # the inlined data is the run: every action of the drawn steps, the audited bubbles
    data = report_data(run.timeline, result)
    assert sum(len(s["actions"]) for s in data["steps"]) == run.actions().height
    assert data["bubble"]["ranks"] == [{"rank": r.rank, "measured": r.bubble, "ideal": r.replay_bubble}
                                       for r in result.ranks]
    assert data["median_step"] == median_step(result)
    blob = re.search(r'<script type="application/json" id="pa-data">(.*?)</script>', page, re.S).group(1)
    assert json.loads(blob) == json.loads(json.dumps(data))


@pytest.mark.slow
def test_report_renders_in_chromium(imb, tmp_path):
    run, result = imb
    page = tmp_path / "report.html"
    # after drawing, hover the first box as a user would and keep what the tooltip showed
    hover = """<script>
    var box = document.querySelector("#pa-timeline-svg rect.act.measured");
    box.dispatchEvent(new MouseEvent("mousemove", {bubbles: true, clientX: 50, clientY: 50}));
    var tip = document.getElementById("pa-tip");
    document.body.setAttribute("data-hover", tip.hidden ? "hidden" : tip.textContent);
    </script></body>"""
    page.write_text(render_html(run.timeline, result).replace("</body>", hover), encoding="utf-8")
    dom, log = dump_dom(page, tmp_path)
    body = re.search(r"<body[^>]*>", dom).group(0)
    assert 'data-rendered="ok"' in body, body
    assert page_error(dom) is None, page_error(dom)
    assert not console_errors(log), console_errors(log)
    # the timeline of the median step: one box per action, each with its hover text
    k = median_step(result)
    n = run.actions().filter(pl.col("step") == k).height
    timeline = svg(dom, "pa-timeline-svg")
    head = re.match(r"<svg[^>]*>", timeline).group(0)
    assert f'data-step="{k}"' in head and f'data-actions="{n}"' in head
    boxes = re.findall(r'<rect class="act measured"[^>]*data-tip="([^"]*)"', timeline)
    assert len(boxes) == n
    assert all("compute" in t and "span" in t and "action" in t for t in boxes)
    shown = re.search(r'data-hover="([^"]*)"', dom).group(1)
    assert shown.startswith("action ") and "compute" in shown and "span" in shown, shown
    ideal = re.findall(r'<rect class="act ideal"', timeline)
    assert len(ideal) == n
    bars = re.findall(r'<rect class="bar"[^>]*data-tip="rank (\d+) (measured|replay ideal): ([\d.]+)%"',
                      svg(dom, "pa-bubble-svg"))
    assert len(bars) == 2 * len(result.ranks)
    for rank, what, value in bars:
        r = next(x for x in result.ranks if x.rank == int(rank))
        want = r.bubble if what == "measured" else r.replay_bubble
        assert float(value) == pytest.approx(100 * want, abs=0.051)
    assert svg(dom, "pa-inflight-svg").count("<path") == len(result.stages)
    assert "No [memory] samples" in dom  # this run was profiled without memory
    # everything the text report keeps behind --verbose is on the page
    for section in ("stages-section", "ranks-section", "notes-section"):
        assert f'<section id="{section}">' in dom
    stages = re.search(r'<section id="stages-section">.*?</section>', dom, re.S).group(0)
    assert stages.count("<tr>") == len(result.stages) + 1
    ranks = re.search(r'<section id="ranks-section">.*?</section>', dom, re.S).group(0)
    assert ranks.count("<tr>") == len(result.ranks) + 1
    assert "(PP-1)(F+B)" in dom and "DeepSeek-V3 report" in dom  # the published formula
    for f in result.findings:
        assert f.code in dom
    for note in result.notes:
        assert html.escape(note, quote=True) in dom


@pytest.mark.slow
def test_memory_and_multi_stage_reports_render(tmp_path):
    for name, path in (("memory", MEMORY), ("zbv", ZBV)):
        run = pipeaudit.load(path)
        page = tmp_path / f"{name}.html"
        page.write_text(render_html(run.timeline, run.audit()), encoding="utf-8")
        dom, log = dump_dom(page, tmp_path)
        assert 'data-rendered="ok"' in re.search(r"<body[^>]*>", dom).group(0)
        assert page_error(dom) is None and not console_errors(log)
        if name == "memory":
            assert svg(dom, "pa-memory-svg").count("<path") == len(run.timeline.ranks)
        else:
            assert svg(dom, "pa-timeline-svg").count('<rect class="act measured"') == \
                run.actions().filter(pl.col("step") == median_step(run.audit())).height


@pytest.mark.slow
def test_report_without_pipeline_renders(tmp_path):
    trace = tmp_path / "rank0.json"
    trace.write_text(json.dumps({
        "distributedInfo": {"rank": 0, "world_size": 1, "backend": "gloo"},
        "traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1,
                         "ts": 1_700_000_000_000_000 + 10 * i, "dur": 5} for i in range(20)],
    }))
    run = pipeaudit.load(trace)
    result = run.audit()
    assert not result.pipeline_found
    page = tmp_path / "none.html"
    page.write_text(render_html(run.timeline, result), encoding="utf-8")
    dom, log = dump_dom(page, tmp_path)
    assert 'data-rendered="ok"' in re.search(r"<body[^>]*>", dom).group(0)
    assert page_error(dom) is None and not console_errors(log)
    assert "No pipeline steps to draw" in dom and "NO_PIPELINE" in dom


@pytest.mark.slow
def test_a_script_error_is_recorded_in_the_dom(tmp_path, imb):
    """The error trap itself works: a broken script leaves data-error, not data-rendered."""
    run, result = imb
    page = render_html(run.timeline, result).replace('JSON.parse(document.getElementById("pa-data")',
                                                     'JSON.parse(document.getElementById("missing")')
    path = tmp_path / "broken.html"
    path.write_text(page, encoding="utf-8")
    if not any(shutil.which(b) for b in BROWSERS) and not os.environ.get("CI"):
        pytest.skip("no chromium on this machine")
    dom, _ = dump_dom(path, tmp_path)
    assert 'data-rendered="ok"' not in dom
    assert page_error(dom)


def test_analyze_html_cli(tmp_path):
    out = tmp_path / "report.html"
    res = invoke("analyze", str(IMB), "--html", str(out))
    assert res.exit_code == 0, res.output
    assert "Pipeline bubble" in res.output  # the usual report still goes to stdout
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    out.write_text("old")
    res = invoke("analyze", str(IMB), "--html", str(out))  # overwritten, as cp does
    assert res.exit_code == 0 and out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    res = invoke("analyze", str(IMB), "--html", str(out), "--force", "--format", "json")
    assert res.exit_code == 0  # --force is still accepted
    json.loads(res.stdout)


@pytest.mark.slow
def test_analyze_html_end_to_end(tmp_path):
    """The installed entry point as a user runs it, in a subprocess."""
    out = tmp_path / "r.html"
    env = repo_env()
    proc = subprocess.run([sys.executable, "-m", "pipeaudit", "analyze", str(IMB), "--html", str(out),
                           "--format", "markdown"], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("# pipeaudit report")
    assert f"wrote {out}" in proc.stderr
    assert out.stat().st_size > 10_000


#: After drawing: pin the timeline to the window's top-left at 1 px per viewBox unit and record
#: two points of one action in ``data-probe``: inside a wait of its span at least 10 px wide,
#: and inside a compute part at least 6 px wide (3 px under the top edge: clear of the label).
PROBE = """<script>
(function () {
  var svg = document.getElementById("pa-timeline-svg");
  svg.setAttribute("style", "position:fixed;left:0;top:0;width:1000px;height:auto;background:#fff;z-index:99");
  function n(r, a) { return parseFloat(r.getAttribute(a)); }
  var comps = [].slice.call(svg.querySelectorAll("rect.act.compute"));
  var probe = null;
  [].slice.call(svg.querySelectorAll("rect.act.measured")).some(function (sp) {
    var x = n(sp, "x"), w = n(sp, "width"), y = n(sp, "y");
    var mine = comps.filter(function (c) {
      return n(c, "y") === y && n(c, "x") >= x - 0.01 && n(c, "x") <= x + w + 0.01;
    }).sort(function (a, b) { return n(a, "x") - n(b, "x"); });
    var t = x, gap = null;
    mine.forEach(function (c) {
      if (!gap && n(c, "x") - t >= 10) { gap = [t, n(c, "x")]; }
      t = Math.max(t, n(c, "x") + n(c, "width"));
    });
    if (!gap && x + w - t >= 10) { gap = [t, x + w]; }
    var solid = mine.filter(function (c) { return n(c, "width") >= 6; })[0];
    if (!gap || !solid) { return false; }
    probe = [(gap[0] + gap[1]) / 2, y + 3, n(solid, "x") + n(solid, "width") / 2, y + 3, sp.getAttribute("fill")];
    return true;
  });
  document.body.setAttribute("data-probe", probe ? probe.join(",") : "none");
})();
</script></body>"""


def _screenshot(page: Path, tmp_path: Path) -> Path:
    out = tmp_path / "shot.png"
    cmd = [_browser(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'chromium-shot'}",
           "--hide-scrollbars", "--force-device-scale-factor=1", "--window-size=1000,700",
           "--virtual-time-budget=5000", f"--screenshot={out}", page.resolve().as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0 and out.exists(), proc.stderr[-2000:]
    return out


def _rgb(hex_colour: str) -> tuple[int, int, int]:
    h = hex_colour.lstrip("#")
    return tuple(int(h[i:i + 2], 16) for i in (0, 2, 4))  # type: ignore[return-value]


@pytest.mark.slow
def test_timeline_screenshot_draws_waiting_apart_from_compute(tmp_path):
    """A screenshot of the timeline of an un-annotated run (DeepSpeed: its actions' spans hold
    their send/recv waits): inside one action, a pixel where it waits is the pale band of its
    kind's colour over the bubble background, a pixel where it computes is the colour itself."""
    from PIL import Image

    run = pipeaudit.load(SAMPLES / "deepspeed_p4_m8")
    result = run.audit()
    page = tmp_path / "ds.html"
    page.write_text(render_html(run.timeline, result).replace("</body>", PROBE), encoding="utf-8")
    dom, log = dump_dom(page, tmp_path)
    assert page_error(dom) is None and not console_errors(log)
    probe = re.search(r'data-probe="([^"]*)"', dom).group(1)
    assert probe != "none", "no action with a wait and a compute part wide enough to sample"
    xw, yw, xc, yc, fill = probe.split(",")
    shot = Image.open(_screenshot(page, tmp_path)).convert("RGB")
    wait = shot.getpixel((round(float(xw)), round(float(yw))))
    compute = shot.getpixel((round(float(xc)), round(float(yc))))
    kind = _rgb(fill)
    data = report_data(run.timeline, result)
    pale = tuple(round(0.3 * k + 0.7 * b) for k, b in zip(kind, _rgb(data["colours"]["bubble"])))
    assert all(abs(c - k) <= 6 for c, k in zip(compute, kind)), (compute, kind)
    assert all(abs(w - p) <= 6 for w, p in zip(wait, pale)), (wait, pale)
    assert sum(abs(w - c) for w, c in zip(wait, compute)) > 120, (wait, compute)
