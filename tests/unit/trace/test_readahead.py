"""A file read ahead on a thread (:mod:`pipeaudit.trace.readahead`) gives exactly what
``decode_file`` gives, result or error; a read made for other options, columns or another
file is never used; the CLI starts it before polars, numpy or the analysis are imported."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from pipeaudit.trace import ReadOptions, Tokenizer, readahead, scanner
from pipeaudit.trace.columns import check_columns
from pipeaudit.trace.decode import decode_file
from pipeaudit.trace.load import map_ranks
from tests.support.cli import invoke
from tests.support.child import repo_env
from tests.support.paths import REPO, SAMPLES, TORCH_CPU
from tests.support.synth import simple_rank, x
from tests.unit.trace.test_trace_batches import BAD, _files, _outcome, _same

TOKENIZERS = [Tokenizer.MSGSPEC] + ([Tokenizer.SCANNER] if scanner.available() else [])
COLUMNS = ("tid", "correlation", "external_id")


def _options(tokenizer: Tokenizer, batch_bytes: int = 4 << 20) -> ReadOptions:
    return ReadOptions(tokenizer=tokenizer, batch_bytes=batch_bytes, max_event_bytes=64 << 20)


def _ahead(path: Path, options: ReadOptions, columns=COLUMNS):
    """(decode_file's outcome after a read ahead of ``path``, the read ahead)."""
    ahead = readahead.start(path, options, check_columns(columns))
    return _outcome(decode_file, path, options=options, columns=columns), ahead


@pytest.fixture(autouse=True)
def _nothing_pending():
    yield
    readahead.drop()


@pytest.mark.parametrize("tokenizer", TOKENIZERS, ids=lambda t: t.value)
@pytest.mark.parametrize("path", _files()[:6], ids=lambda p: f"{p.parent.name}/{p.name}")
def test_same_result_as_reading_the_file(path: Path, tokenizer: Tokenizer) -> None:
    for batch in (4 << 20, 3000):
        options = _options(tokenizer, batch)
        got, ahead = _ahead(path, options)
        assert ahead.done is not None and readahead.pending_path() is None  # it was taken
        _same(decode_file(path, options, columns=COLUMNS), got)


def test_odd_files_same_result(tmp_path: Path) -> None:
    """Invalid UTF-8 (repaired and counted), escaped strings (the scanner leaves those
    batches to msgspec) and gzip members, in small batches."""
    doc = simple_rank(1)
    t0 = doc["traceEvents"][0]["ts"]
    doc["traceEvents"] += [x(f"op{i}", t0 + 30 + i, 1, correlation=i) for i in range(60)]
    doc["traceEvents"] += [x('esc"aped', t0 + 100, 2), x("bad UTF-8 \udcff", t0 + 101, 2)]
    raw = json.dumps(doc, ensure_ascii=False).encode("utf-8", "surrogateescape")
    for name, data in [("bad_utf8.json", raw), ("members.json.gz",
                                                gzip.compress(raw[:500]) + gzip.compress(raw[500:]))]:
        p = tmp_path / name
        p.write_bytes(data)
        for tokenizer in TOKENIZERS:
            options = _options(tokenizer, 200)
            got, ahead = _ahead(p, options)
            assert ahead.done is not None
            want = decode_file(p, options, columns=COLUMNS)
            _same(want, got)
    assert any("invalid UTF-8" in w or "UTF-8" in w for w in want.warnings)


@pytest.mark.parametrize("content", BAD)
def test_same_error_as_reading_the_file(tmp_path: Path, content: bytes) -> None:
    for gz in (False, True):
        p = tmp_path / ("bad.json.gz" if gz else "bad.json")
        p.write_bytes(gzip.compress(content) if gz else content)
        for tokenizer in TOKENIZERS:
            options = _options(tokenizer, 30)
            want = _outcome(decode_file, p, options=options, columns=COLUMNS)
            got, _ = _ahead(p, options)
            assert got == want if isinstance(want, str) else not isinstance(got, str)
            assert readahead.pending_path() is None


def test_missing_or_damaged_gzip_same_error(tmp_path: Path) -> None:
    data = gzip.compress(json.dumps(simple_rank(0)).encode())
    for name, content in {"trunc.json.gz": data[: len(data) // 2],
                          "corrupt.json.gz": data[:12] + bytes(b ^ 0x5A for b in data[12:40]) + data[40:]}.items():
        p = tmp_path / name
        p.write_bytes(content)
        options = _options(TOKENIZERS[-1], 40)
        want = _outcome(decode_file, p, options=options, columns=COLUMNS)
        assert isinstance(want, str) and _ahead(p, options)[0] == want
    gone = tmp_path / "gone.json"
    assert _ahead(gone, _options(TOKENIZERS[-1]))[0] == f"{gone}: no such file or directory"


def test_a_read_for_other_options_columns_or_file_is_not_used() -> None:
    path, other = sorted(TORCH_CPU.glob("*.json.gz"))[:2]
    options = _options(TOKENIZERS[-1])
    want = decode_file(path, options, columns=COLUMNS)
    # other columns: dropped (and stopped), the file read again
    ahead = readahead.start(path, options, check_columns(("tid",)))
    _same(want, decode_file(path, options, columns=COLUMNS))
    assert readahead.pending_path() is None and ahead._cancelled.is_set()
    # other batch size: the same; a different budget alone reads the same, so it is used
    ahead = readahead.start(path, _options(TOKENIZERS[-1], 1 << 20), check_columns(COLUMNS))
    _same(want, decode_file(path, options, columns=COLUMNS))
    assert ahead._cancelled.is_set() and ahead.done is None
    ahead = readahead.start(path, ReadOptions.for_budget(8 << 30, tokenizer=options.tokenizer),
                            check_columns(COLUMNS))
    _same(want, decode_file(path, options, columns=COLUMNS))
    assert ahead.done is not None
    # another file: left pending for its own decode
    readahead.start(other, options, check_columns(COLUMNS))
    _same(want, decode_file(path, options, columns=COLUMNS))
    assert readahead.pending_path() == other
    _same(decode_file(other, options, columns=COLUMNS), decode_file(other, options, columns=COLUMNS))


def test_map_ranks_decodes_the_file_read_ahead_first() -> None:
    run = SAMPLES / "1f1b_p4_m8"
    files = sorted(run.glob("rank*.json.gz"))
    smallest = min(files, key=lambda f: f.stat().st_size)
    options = ReadOptions.for_share(None, 1)
    want = map_ranks([str(run)], None, jobs=1, columns=COLUMNS)
    ahead = readahead.start(smallest, options, check_columns(COLUMNS))
    got = map_ranks([str(run)], None, jobs=1, columns=COLUMNS)
    assert ahead.done is not None and readahead.pending_path() is None
    assert [i.path for i in got.infos] == [i.path for i in want.infos]
    for a, b in zip(want.values, got.values):
        _same(a, b)
    # a read of a file that is not one of the run's is dropped
    ahead = readahead.start(sorted(TORCH_CPU.glob("*.json.gz"))[0], options, check_columns(COLUMNS))
    map_ranks([str(run)], None, jobs=1, columns=COLUMNS)
    assert readahead.pending_path() is None and ahead._cancelled.is_set()


def test_analyze_reads_ahead_and_reports_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    run = SAMPLES / "1f1b_p4_dp2_m8"
    taken: list[object] = []
    take = readahead.take

    def spy(*args, **kwargs):
        out = take(*args, **kwargs)
        taken.append(out)
        return out

    monkeypatch.setattr(readahead, "take", spy)
    with_it = invoke("analyze", run, "--format", "json")
    assert with_it.exit_code == 0, with_it.output
    assert sum(t is not None for t in taken) == 1
    monkeypatch.setattr("pipeaudit.prestart._read_ahead", lambda *a: None)
    taken.clear()
    without = invoke("analyze", run, "--format", "json")
    assert without.exit_code == 0 and not any(taken)
    assert json.loads(with_it.stdout) == json.loads(without.stdout)


_FRESH = """
import sys
{first}
from pipeaudit.prestart import start_early
start_early([{run!r}], {jobs}, None, None, False)
heavy = [m for m in ("polars", "numpy", "pandas", "rich", "pipeaudit.audit", "pipeaudit.timeline.model",
                     "pipeaudit.trace.model", "pipeaudit.api") if m in sys.modules]
from pipeaudit.trace import readahead
print(heavy, readahead.pending_path() is not None)
"""


@pytest.mark.skipif(not scanner.available(), reason="the read ahead needs the compiled scanner")
@pytest.mark.parametrize("jobs", [1, 2])
def test_the_cli_reads_before_it_imports_polars(jobs: int) -> None:
    """``analyze`` starts reading the first rank before polars, numpy and the analysis load
    (they load while it reads): its start is the interpreter, click and the reader."""
    code = _FRESH.format(first="import pipeaudit.cli.main, pipeaudit.cli.analyze",
                         run=str(SAMPLES / "1f1b_p4_m8"), jobs=jobs)
    env = repo_env()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[0] == "[] True", out.stdout
