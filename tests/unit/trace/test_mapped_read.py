"""A plain (not gzip) trace file is mapped into memory rather than read in chunks
(:meth:`pipeaudit.trace.source.TraceBytes.chunks`): the same RankTrace, or the same error with
the same byte offsets, as the chunked read, whatever the batch size and the tokenizer; a file
that needs a repair (invalid UTF-8, a BOM) is read in chunks as before. The compiled UTF-8
check agrees with Python's strict decoder."""

from __future__ import annotations

import gzip
import json
import mmap
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeaudit.trace import Tokenizer, scanner, source
from pipeaudit.trace.source import TraceBytes
from tests.support.synth import simple_rank, write, x
from tests.unit.trace.test_trace_batches import BAD, TOKENIZERS, WHOLE, _files, _outcome, _same, read_batched
from tests.unit.trace.test_trace_fuzz import _write, mutated_traces

pytestmark = pytest.mark.skipif(scanner.utf8_valid(b"") is None,
                                reason="the compiled module (its UTF-8 check) is not built")
MAPPED, CHUNKED = 1, 1 << 62  # MAP_MIN_BYTES: map every plain file, or none


def _both(monkeypatch: pytest.MonkeyPatch, path: Path, **kw):
    """(the chunked read's outcome, the mapped read's outcome) of ``path``."""
    monkeypatch.setattr(source, "MAP_MIN_BYTES", CHUNKED)
    want = _outcome(read_batched, path, **kw)
    monkeypatch.setattr(source, "MAP_MIN_BYTES", MAPPED)
    return want, _outcome(read_batched, path, **kw)


def _assert_same(want, got) -> None:
    if isinstance(want, str):
        assert got == want
    else:
        assert not isinstance(got, str), got
        _same(want, got)


def test_a_plain_file_is_mapped_and_a_gzip_one_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = write(tmp_path / "rank0.json", simple_rank(0))
    gz = tmp_path / "rank1.json.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    monkeypatch.setattr(source, "MAP_MIN_BYTES", MAPPED)
    chunks = list(TraceBytes(plain).chunks())
    assert len(chunks) == 1 and isinstance(chunks[0], mmap.mmap) and chunks[0].closed
    assert not any(isinstance(c, mmap.mmap) for c in TraceBytes(gz).chunks())
    monkeypatch.setattr(source, "MAP_MIN_BYTES", CHUNKED)
    assert not any(isinstance(c, mmap.mmap) for c in TraceBytes(plain).chunks())


@pytest.mark.parametrize("path", _files()[:8], ids=lambda p: f"{p.parent.name}/{p.name}")
def test_real_traces_same_result(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: Path) -> None:
    plain = tmp_path / path.name.removesuffix(".gz")
    plain.write_bytes(gzip.decompress(path.read_bytes()))
    for tokenizer in TOKENIZERS:
        for batch in (4 << 20, 5000):
            want, got = _both(monkeypatch, plain, batch_bytes=batch, tokenizer=tokenizer)
            assert not isinstance(want, str), want
            _assert_same(want, got)


def _odd_texts() -> list[bytes]:
    """Texts the chunked read repairs or words an error about, and valid non-ASCII ones."""
    good = simple_rank(1)
    good["traceEvents"] += [x("µs ops — π", 1_000_100 + i, 1, correlation=i) for i in range(20)]
    text = json.dumps(good, ensure_ascii=False, indent=1).encode()
    at = text.index("µs".encode())
    return [text, b"\xef\xbb\xbf" + text, text[:at] + b"\xff\xfe" + text[at:],
            text[:at] + b"\xc3" + text[at + 2:], text[:-40], text + b"\n  \n", text + b"x",
            *BAD]


@pytest.mark.parametrize("index", range(len(_odd_texts())))
def test_odd_texts_same_outcome(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, index: int) -> None:
    path = tmp_path / "odd.json"
    path.write_bytes(_odd_texts()[index])
    for tokenizer in TOKENIZERS:
        for batch in (1, 64, WHOLE):
            _assert_same(*_both(monkeypatch, path, batch_bytes=batch, tokenizer=tokenizer))


@settings(max_examples=int(os.environ.get("PIPEAUDIT_FUZZ_EXAMPLES", "60")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(doc=mutated_traces(), cut=st.none() | st.integers(0, 400), pretty=st.booleans(),
       batch=st.sampled_from([1, 200, WHOLE]), tokenizer=st.sampled_from(TOKENIZERS))
def test_fuzz_same_outcome(monkeypatch: pytest.MonkeyPatch, scratch, doc, cut: int | None,
                           pretty: bool, batch: int, tokenizer: Tokenizer) -> None:
    path = _write(scratch, doc, False, cut, pretty)
    _assert_same(*_both(monkeypatch, path, batch_bytes=batch, tokenizer=tokenizer))


@settings(max_examples=300, deadline=None)
@given(text=st.text(), junk=st.lists(st.tuples(st.integers(0, 64), st.binary(min_size=1, max_size=4)),
                                     max_size=3))
def test_utf8_check_agrees_with_python(text: str, junk: list[tuple[int, bytes]]) -> None:
    data = (text * 3).encode()
    for at, b in junk:  # bytes spliced in: often invalid, sometimes still valid
        at = min(at, len(data))
        data = data[:at] + b + data[at:]
    try:
        data.decode("utf-8")
        valid = True
    except UnicodeDecodeError:
        valid = False
    assert scanner.utf8_valid(data) is valid
