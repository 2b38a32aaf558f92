"""discover: files, directories, globs -> trace files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pipeaudit.errors import TraceError
from pipeaudit.trace import discover, rank_from_name
from tests.support.synth import simple_rank, write
from tests.support.paths import HTA


def _names(paths: list[Path]) -> list[str]:
    return [p.name for p in paths]


def _err(args) -> str:
    with pytest.raises(TraceError) as info:
        discover(args)
    return str(info.value)


def test_run_dir_ignores_manifest_and_non_traces(tmp_path: Path) -> None:
    for r in (0, 1, 2, 10):
        write(tmp_path / f"rank{r}.json.gz", simple_rank(r, 11))
    write(tmp_path / "manifest.json", {"world_size": 11, "traceEvents": "not really"})
    write(tmp_path / "config.json", {"lr": 0.1})
    write(tmp_path / "events.json", [{"ph": "X"}])  # a bare event list is not a Kineto trace
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "sub").mkdir()
    write(tmp_path / "sub" / "rank3.json", simple_rank(3, 11))  # subdirs only if no traces at top
    assert _names(discover([tmp_path])) == ["rank0.json.gz", "rank1.json.gz", "rank2.json.gz", "rank10.json.gz"]


def test_tensorboard_handler_dir(tmp_path: Path) -> None:
    write(tmp_path / "host_123.1700000000001.pt.trace.json", simple_rank(0, 2))
    write(tmp_path / "host_124.1700000000002.pt.trace.json.gz", simple_rank(1, 2))
    assert _names(discover([str(tmp_path)])) == [
        "host_123.1700000000001.pt.trace.json", "host_124.1700000000002.pt.trace.json.gz"]


def test_torchtitan_layout(tmp_path: Path) -> None:
    it10 = tmp_path / "profile_trace" / "iteration_10"
    for r in range(2):
        write(it10 / f"rank{r}_trace.json", simple_rank(r, 2))
    assert _names(discover([tmp_path / "profile_trace"])) == ["rank0_trace.json", "rank1_trace.json"]
    assert _names(discover([tmp_path])) == ["rank0_trace.json", "rank1_trace.json"]
    it20 = tmp_path / "profile_trace" / "iteration_20"
    for r in range(2):
        write(it20 / f"rank{r}_trace.json", simple_rank(r, 2))
    msg = _err([tmp_path / "profile_trace"])
    assert msg == (f"{tmp_path / 'profile_trace'}: holds traces of several iterations (iteration_10, "
                   f"iteration_20); pass one of them, e.g. {it20}")
    assert _names(discover([it20])) == ["rank0_trace.json", "rank1_trace.json"]


def test_per_rank_subdirectories(tmp_path: Path) -> None:
    for r in range(3):
        write(tmp_path / f"rank{r}" / "trace.json.gz", simple_rank(r, 3))
    assert [p.parent.name for p in discover([tmp_path])] == ["rank0", "rank1", "rank2"]


def test_files_and_globs(tmp_path: Path) -> None:
    for r in range(3):
        write(tmp_path / f"r{r}.json", simple_rank(r, 3))
    odd = write(tmp_path / "weird.name", simple_rank(0, 3))  # a file named explicitly is taken
    assert discover([odd]) == [odd]
    assert _names(discover([str(tmp_path / "r*.json")])) == ["r0.json", "r1.json", "r2.json"]
    assert _names(discover([str(tmp_path / "**" / "r[12].json")])) == ["r1.json", "r2.json"]
    # the same file twice (file + glob) is listed once
    assert _names(discover([tmp_path / "r1.json", str(tmp_path / "r*.json")])) == ["r1.json", "r0.json", "r2.json"]
    assert _names(discover(str(tmp_path / "r0.json"))) == ["r0.json"]


@pytest.mark.skipif(not HTA.is_dir(), reason="shared HTA traces not present")
def test_shared_dir_finds_every_trace() -> None:
    assert sorted(_names(discover([HTA]))) == sorted(p.name for p in HTA.glob("*.json.gz"))


def test_errors(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    assert _err([missing]) == f"{missing}: no such file or directory"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _err([empty]) == f"{empty}: empty directory"
    no_traces = tmp_path / "no_traces"
    write(no_traces / "config.json", {"a": 1})
    (no_traces / "sub").mkdir()
    (no_traces / "sub" / "x.txt").write_text("x")
    assert _err([no_traces]) == (f"{no_traces}: no trace files in this directory or below (looked for "
                                 "*.json and *.json.gz files holding a Chrome/Kineto trace); not "
                                 "taken: config.json (JSON, but no traceEvents in its first 64 KiB)")
    (no_traces / "sub" / "x.txt").unlink()
    assert _err([no_traces / "sub"]) == (f"{no_traces / 'sub'}: empty directory")
    pattern = str(tmp_path / "*.nothing")
    assert _err([pattern]) == f"{pattern}: no files match this pattern"
    write(tmp_path / "m" / "manifest.json", {"world_size": 2})
    only_manifest = str(tmp_path / "m" / "*.json")
    assert _err([only_manifest]) == f"{only_manifest}: no trace files match this pattern"
    assert _err([]) == "no trace files given"


def test_symlink_loops_and_broken_links(tmp_path: Path) -> None:
    loop = tmp_path / "loop.json"
    os.symlink(loop, loop)
    assert _err([loop]) == f"{loop}: symlink loop (too many levels of symbolic links)"
    d = tmp_path / "run"
    write(d / "rank0.json", simple_rank(0, 1))
    a, b = d / "a.json", d / "b.json"
    os.symlink(b, a)
    os.symlink(a, b)
    assert _err([d]) == f"{a}: symlink loop (too many levels of symbolic links)"
    dangling = tmp_path / "dangling.json"
    os.symlink(tmp_path / "gone.json", dangling)
    assert _err([dangling]) == f"{dangling}: broken symlink (its target does not exist)"
    dir_loop = tmp_path / "dirloop"
    dir_loop.mkdir()
    os.symlink(dir_loop, dir_loop / "again")  # not followed while scanning
    write(dir_loop / "deeper" / "rank0.json", simple_rank(0, 1))
    assert _names(discover([dir_loop])) == ["rank0.json"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads everything")
def test_unreadable_directory(tmp_path: Path) -> None:
    d = tmp_path / "locked"
    d.mkdir()
    d.chmod(0)
    try:
        assert _err([d]) == f"{d}: permission denied"
    finally:
        d.chmod(0o755)


@pytest.mark.parametrize(
    ("name", "rank"),
    [("rank0_trace.json.gz", 0), ("a100_ddp_ws2_rank0.json.gz", 0), ("trace_8_rank_1.json", 1),
     ("RANK-12.json", 12), ("nccl128_sampled_rank1.json.gz", 1), ("amd_mi250_no_rank.json.gz", None),
     ("frank1.json", None), ("host_123.1700000000001.pt.trace.json", None), ("rank3_step_rank5.json", 5)],
)
def test_rank_from_name(name: str, rank: int | None) -> None:
    assert rank_from_name(name) == rank


def test_gzip_trace_sniffed_in_dir(tmp_path: Path) -> None:
    write(tmp_path / "t.json.gz", simple_rank(0, 1))
    write(tmp_path / "other.json.gz", json.dumps({"a": 1}))
    assert _names(discover([tmp_path])) == ["t.json.gz"]


def test_permission_denied_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Simulated, so that it also runs as root."""
    import importlib

    disc = importlib.import_module("pipeaudit.trace.discover")  # the package's `discover` is the function
    source = importlib.import_module("pipeaudit.trace.source")
    from pipeaudit.trace import read_trace

    f = write(tmp_path / "rank0.json", simple_rank(0, 1))

    def deny(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(source, "_open_fd", deny)
    with pytest.raises(TraceError, match=r"rank0\.json: permission denied$"):
        read_trace(f)
    monkeypatch.setattr(disc.os, "scandir", deny)
    assert _err([tmp_path]) == f"{tmp_path}: permission denied"
