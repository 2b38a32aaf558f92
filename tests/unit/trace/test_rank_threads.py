"""A run of a few files (gzip or plain JSON) is read by threads of this process
(:func:`pipeaudit.trace.pool.use_threads`): the same timeline, audit and errors as one rank
after the other, and the timings line says so."""

from __future__ import annotations

import gzip
import io
import shutil
from pathlib import Path

import pytest

import pipeaudit
from pipeaudit import timings
from pipeaudit.errors import TraceError
from pipeaudit.timeline import REDUCE_COLUMNS
from pipeaudit.trace import ReadOptions, pool, readahead, scanner
from pipeaudit.trace.schema import REQUIRED_COLUMNS
from tests.support.paths import SAMPLES
from tests.support.synth import simple_rank, write

pytestmark = pytest.mark.skipif(not scanner.available(), reason="threads need the compiled scanner")


def _plain(run: str, out: Path) -> Path:
    """A sample run's rank files gunzipped (plain JSON, as torch writes by default)."""
    out.mkdir()
    for f in (SAMPLES / run).iterdir():
        if f.name.endswith(".gz"):
            (out / f.name.removesuffix(".gz")).write_bytes(gzip.decompress(f.read_bytes()))
        else:
            shutil.copy(f, out / f.name)
    return out


@pytest.fixture
def threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs of any size take the threads (as 100 MB ranks do)."""
    monkeypatch.setattr(pool, "POOL_MIN_JSON_BYTES", 1)
    monkeypatch.setattr(pool, "cores", lambda: 2)


@pytest.mark.parametrize(("run", "plain"), [("interleaved-1f1b_p4_m8_v2", True),
                                           ("1f1b_p2_m4_noannot", True), ("1f1b_p4_m8_imb_s1x3", False)])
def test_same_timeline_and_audit(tmp_path: Path, threads, run: str, plain: bool,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    d = _plain(run, tmp_path / run) if plain else SAMPLES / run
    one = pipeaudit.load(d, jobs=1)
    monkeypatch.setenv(timings.ENV, "1")
    got = pipeaudit.load(d)
    line = io.StringIO()
    timings.report(line)
    assert "ranks, 2 threads, read: scanner" in line.getvalue()
    assert got.audit().to_dict() == one.audit().to_dict()
    a, b = one.timeline, got.timeline
    assert a.inputs == b.inputs and a.warnings == b.warnings
    for ra, rb in zip(a.ranks, b.ranks):
        assert ra.actions.equals(rb.actions) and ra.compute.equals(rb.compute)


def test_errors_keep_their_order(tmp_path: Path, threads) -> None:
    for r in (0, 2):
        write(tmp_path / f"rank{r}.json", simple_rank(r, 4))
    with pytest.raises(TraceError, match="missing ranks 1, 3"):
        pipeaudit.load(tmp_path)
    (tmp_path / "rank3.json").write_text('{"traceEvents": 5}')
    (tmp_path / "rank4.json").write_text('{"traceEvents": 6}')
    with pytest.raises(TraceError, match="rank3.json: not a trace"):  # the first in file order
        pipeaudit.load(tmp_path)


def test_each_thread_takes_a_file_read_ahead(tmp_path: Path, threads) -> None:
    """The CLI reads one file ahead per thread while it imports; the threads take them."""
    d = _plain("1f1b_p4_m8", tmp_path / "run")
    want = pipeaudit.load(d, jobs=1).audit().to_dict()
    files = sorted(d.glob("rank*.json"))
    columns = frozenset(REDUCE_COLUMNS) | REQUIRED_COLUMNS
    options = ReadOptions.for_share(None, 2)
    first = readahead.start(files[2], options, columns)
    second = readahead.start(files[0], options, columns, keep=True)
    assert readahead.pending_paths() == [files[2], files[0]]
    try:
        assert pipeaudit.load(d).audit().to_dict() == want
        assert first.done is not None and second.done is not None and not readahead.pending_paths()
        readahead.start(files[1], options, columns)
        readahead.start(files[3], options, columns, keep=True)
        assert readahead.take(files[3], options, columns) is not None  # either, by its path
        assert readahead.pending_paths() == [files[1]]
    finally:
        readahead.drop()
    assert not readahead.pending_paths()
