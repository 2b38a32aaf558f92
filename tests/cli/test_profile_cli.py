"""``pipeaudit profile`` fails fast on bad options: one line, exit 2, before any process starts
or torch is imported."""

from __future__ import annotations


import pytest

from tests.support.child import run_python
from tests.support.cli import invoke


BAD_ARGS = [
    (["--schedule", "1f1b", "--stages", "4", "--microbatches", "2"], "1f1b needs at least"),
    (["--schedule", "zbv", "--chunks", "3"], "--chunks must be 2"),
    (["--schedule", "dualpipev", "--stages", "2", "--microbatches", "3"], "dualpipev needs"),
    (["--schedule", "interleaved-1f1b", "--stages", "4", "--microbatches", "9"], "rounds"),
    (["--schedule", "1f1b", "--stages", "4", "--microbatches", "4", "--layers", "3"],
     "fewer than the 4 stages"),
    (["--schedule", "bogus"], "unknown schedule 'bogus'"),
    (["--imbalance", "7=2"], "stage 7 does not exist"),
    (["--imbalance", "1=1.5"], "STAGE=FACTOR with integers"),
    (["--batch-size", "10", "--microbatches", "4"], "multiple of --microbatches"),
    (["--steps", "0"], "--steps must be >= 1"),
    (["--timeout", "0"], "--timeout must be > 0"),
    (["--backend", "mpi"], "--backend must be one of"),
]


@pytest.mark.parametrize("args,fragment", BAD_ARGS, ids=[a[1] for a in BAD_ARGS])
def test_cli_invalid_fails_fast_one_line(tmp_path, monkeypatch, args, fragment):
    import subprocess as sp


    def no_popen(*a, **k):  # a process start here would be a bug
        raise AssertionError("a process was started for an invalid configuration")

    monkeypatch.setattr(sp, "Popen", no_popen)
    out = tmp_path / "out"
    result = invoke("profile", *args, "--out", str(out))
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("pipeaudit: error: ")
    assert fragment in lines[0]
    assert not out.exists()


def test_cli_refuses_non_empty_out_without_force(tmp_path):

    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    result = invoke("profile", "--out", str(out))
    assert result.exit_code == 2
    assert "--out is not empty (use --force" in result.stderr
    assert (out / "keep.txt").read_text() == "x"


def test_cli_nccl_without_gpus_fails_before_start(tmp_path):
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available() and torch.cuda.device_count() >= 2:
        pytest.skip("this host has GPUs")

    result = invoke("profile", "--backend", "nccl", "--out", str(tmp_path / "o"))
    assert result.exit_code == 2
    assert "needs one CUDA device per rank on this host (2 ranks" in result.stderr
    assert "--single-process" in result.stderr  # the way to use fewer GPUs


@pytest.mark.parametrize("args", [["--device", "cuda"], ["--device", "cuda", "--single-process"]])
def test_cli_device_cuda_without_gpus_fails_before_start(tmp_path, args):
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this host has a GPU")
    result = invoke("profile", "--schedule", "gpipe", *args, "--out", str(tmp_path / "o"))
    assert result.exit_code == 2
    assert "CUDA device" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "o" / "manifest.json").exists()


@pytest.mark.parametrize("args, says", [
    (["--device", "cpu", "--backend", "nccl"], "--backend nccl needs --device cuda"),
    (["--device", "cuda", "--backend", "gloo", "--dp", "2"], "through host memory) runs one"),
    (["--device", "tpu"], "--device must be one of auto, cpu, cuda"),
])
def test_cli_device_conflicts_are_config_errors(tmp_path, args, says):
    result = invoke("profile", *args, "--out", str(tmp_path / "o"))
    assert result.exit_code == 2
    assert says in result.stderr


def test_invalid_options_do_not_import_torch(tmp_path):
    """In a fresh interpreter: the CLI rejects bad options without importing torch."""
    code = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from pipeaudit.cli.main import cli\n"
        f"r = CliRunner().invoke(cli, ['profile', '--schedule', 'zbv', '--chunks', '3', "
        f"'--out', {str(tmp_path / 'o')!r}])\n"
        "assert r.exit_code == 2, r.output\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
        "import pipeaudit, pipeaudit.harness\n"
        "assert 'torch' not in sys.modules\n"
        "print('ok')\n"
    )
    res = run_python(code)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "ok"
