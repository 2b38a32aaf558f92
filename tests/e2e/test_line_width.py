"""Every command's text output fits a 120-column terminal: each command on the bundled real
runs, at ``COLUMNS=120``, fails on any wider line. Exempt are what cannot wrap without
changing its meaning: a Markdown table row and a GitHub workflow command (``::error ...``,
one line by definition); JSON is a document, not text."""

from __future__ import annotations

import pytest

from pathlib import Path

from tests.support.cli import invoke
from tests.support import paths

WIDTH = 120
ENV = {"COLUMNS": str(WIDTH)}
#: the runs as the README names them, from a folder holding them (see ``here``)
SAMPLES = Path("sample_traces")
HEAVY = SAMPLES / "1f1b_p4_m8_imb_s1x3"  # the README's run
#: one of each shape: replicas, interleaved, V, DeepSpeed, Megatron-core interleaved, one
#: process on a GPU, a user's loop, ranks sharing a GPU with memory, no annotations or steps
RUNS = ["1f1b_p4_m8_imb_s1x3", "1f1b_p4_dp2_m8_slow_r5x3", "interleaved-1f1b_p4_m8_v2", "zbv_p4_m8",
        "deepspeed_p4_m8", "megatron_interleaved-1f1b_p4_m4_v2_imb_s2x3", "single_cuda_1f1b_p4_m8",
        "user_loop_cuda_1f1b_p4_m8", "cuda_shared_zbv_p2_m4_memory", "gpipe_p4_m8_noannot_nosteps"]


@pytest.fixture(autouse=True)
def here(tmp_path, monkeypatch) -> Path:
    """Run where a newcomer does: a folder with the bundled runs in it; outputs land there."""
    (tmp_path / "sample_traces").symlink_to(paths.SAMPLES)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def wide_lines(text: str, *, markdown: bool = False) -> list[str]:
    """The lines of ``text`` wider than :data:`WIDTH` that could have been wrapped."""
    def exempt(line: str) -> bool:
        return (markdown and line.lstrip().startswith("|")) or line.startswith("::")
    return [line for line in text.splitlines() if len(line) > WIDTH and not exempt(line)]


def check(*args, exit_code: int = 0) -> str:
    res = invoke(*args, env=ENV)
    assert res.exit_code == exit_code, res.output
    markdown = "markdown" in map(str, args) or "github" in map(str, args)
    wide = wide_lines(res.stdout, markdown=markdown) + wide_lines(res.stderr)
    assert not wide, f"pipeaudit {' '.join(map(str, args))}: {len(wide)} line(s) over {WIDTH}:\n" + \
        "\n".join(wide)
    return res.stdout


def test_the_check_can_fail():
    assert wide_lines("x" * 121) == ["x" * 121] and wide_lines("x" * 120) == []
    assert wide_lines("| " + "x" * 130, markdown=True) == []
    assert wide_lines("| " + "x" * 130) == ["| " + "x" * 130]


@pytest.mark.parametrize("run", RUNS)
def test_analyze(run):
    for args in ([], ["-v"], ["--format", "markdown"], ["--format", "markdown", "-v"]):
        check("analyze", SAMPLES / run, *args)


@pytest.mark.parametrize("run", ["1f1b_p4_m8_imb_s1x3", "interleaved-1f1b_p4_m8_v2", "deepspeed_p4_m8",
                                 "user_loop_cuda_1f1b_p4_m8"])
def test_explain_whatif_advise(run):
    path = SAMPLES / run
    for fmt in ("text", "markdown"):
        check("explain", path, "--format", fmt)
        check("whatif", path, "--scale", "1=0.5", "--microbatches", "16", "--format", fmt)
        check("advise", path, "--format", fmt)


@pytest.mark.parametrize("args", [
    ["--schedule", "1f1b", "-P", "4", "-M", "8"],
    ["--schedule", "zbv", "-P", "4", "-M", "32", "--comm", "0.5"],  # drawn in bands
    ["--schedule", "interleaved-1f1b", "-P", "8", "-M", "16"],
    ["-P", "4", "-M", "8", "--compare", "gpipe,1f1b,interleaved-1f1b,zb-h1,zbv,dualpipev"],
    ["--schedule", "zb-h2", "-P", "4", "--sweep-microbatches", "2,4,8,16,32"],
    ["--building-block", "eager-1f1b", "-P", "4", "-M", "8"],
])
def test_simulate(args):
    check("simulate", *args)


def test_gate_diff_baseline_export_plot_watch():
    base = "baseline.json"
    check("baseline", SAMPLES / "1f1b_p4_m8", "-o", base)
    for fmt in ("text", "markdown", "github"):
        out = check("gate", HEAVY, "--baseline", base, "--format", fmt, exit_code=1)
        assert "stage 1 compute per step" in out
    check("gate", HEAVY, "--max-bubble", "0.1", exit_code=1)
    for fmt in ("text", "markdown"):
        check("diff", SAMPLES / "1f1b_p4_m8", HEAVY, "--format", fmt)
        check("diff", SAMPLES / "1f1b_p2_m4_memory", SAMPLES / "cuda_shared_1f1b_p2_m4_memory",
              "--format", fmt)
    check("export", HEAVY, "--perfetto", "run.json.gz", "--with-ideal")
    pytest.importorskip("matplotlib")
    check("plot", HEAVY, "-o", "timeline.png")
    check("watch", SAMPLES / "1f1b_p4_m8", "--once")
    out = check("watch", HEAVY, "--once", "--gate", base, exit_code=1)  # regressions explained
    assert "  REGRESSION stage 1 compute per step" in out


def test_sweep_report():
    """A sweep's table of real runs (the bundled ones, audited as a sweep audits its points)
    with a skipped point, rendered again by ``sweep --report``."""
    from pipeaudit.sweep.grid import GridPoint
    from pipeaudit.sweep.results import SweepRecord, SweepResult, save
    from pipeaudit.sweep.runner import audit_point

    points = [("gpipe", 4, 8, 1, "gpipe_p4_m8"), ("1f1b", 4, 8, 1, "1f1b_p4_m8_imb_s1x3"),
              ("interleaved-1f1b", 4, 8, 2, "interleaved-1f1b_p4_m8_v2"), ("zbv", 4, 8, 2, "zbv_p4_m8")]
    records = [audit_point(GridPoint(s, p, m, v), SAMPLES / d, None) for s, p, m, v, d in points]
    records.append(SweepRecord(key="dualpipev_p4_m4", schedule="dualpipev", stages=4,
                               microbatches=4, chunks=2, status="skipped",
                               reason="DualPipeV needs M >= 2P microbatches (M = 4, P = 4); "
                                      "raise --microbatches to 8 or more"))
    Path("sweep").mkdir()
    save(SweepResult(options={"steps": 2, "warmup_steps": 1, "model": {"layers": 8, "hidden": 256}},
                     records=records), Path("sweep"))
    out = check("sweep", "--report", "sweep", "--no-plots")
    assert "interleaved-1f1b_p4_m8" in out and "skipped dualpipev_p4_m4: DualPipeV needs" in out
