"""The compiled scanner under AddressSanitizer and UndefinedBehaviorSanitizer, fuzzed against
the msgspec path.

``pipeaudit/trace/_kscan.c`` is compiled again with ``-fsanitize=address,undefined`` (any
finding aborts), loaded in a child Python with ``libasan`` preloaded (the interpreter itself
is not instrumented), and fed thousands of batches: real events mutated byte by byte, and
the shapes that once mattered (an empty first string: ``memcpy`` with a NULL arena). Where
the scanner answers, its columns must be the msgspec path's exactly (the check of
``test_trace_scanner``). Skipped, with the reason, where the toolchain has no sanitizers.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.support.child import repo_env
from tests.support.paths import REPO

SOURCE = REPO / "pipeaudit" / "trace" / "_kscan.c"
#: Batches fed to the sanitized scanner (PIPEAUDIT_FUZZ_EXAMPLES scales it, as elsewhere).
ITERATIONS = 40 * int(os.environ.get("PIPEAUDIT_FUZZ_EXAMPLES", "60"))

CHILD = r"""
import gzip, importlib.util, random, sys
so, root, iterations = sys.argv[1], sys.argv[2], int(sys.argv[3])
spec = importlib.util.spec_from_file_location("pipeaudit.trace._kscan", so)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
sys.modules["pipeaudit.trace._kscan"] = module  # before pipeaudit.trace.scanner imports it
sys.path[:0] = [root]
from pipeaudit.trace import scanner
assert scanner._kscan is module and scanner.available()
from pipeaudit.trace.columns import DROPPED_CATEGORIES
from tests.unit.trace.test_trace_scanner import FULL, LEAN, _check

# what once mattered, exactly
for data in [b'{"ph": "X", "name": "", "cat": "", "ts": 1, "dur": 1}',
             b'{"ph": "X", "name": "", "ts": 1}, {"ph": "X", "name": "", "ts": 2}',
             b'{"ph": "i", "name": "[memory]", "ts": 1, "args": {}}', b'{}', b'{"ph": ""}']:
    _check(data, FULL)
    _check(data, LEAN)

text = gzip.decompress(open(root + "/sample_traces/1f1b_p2_m4_memory/rank0.json.gz", "rb").read())
start = text.index(b"[", text.index(b'"traceEvents"')) + 1
events = text[start:text.rindex(b"]")]
cuts = [i for i in range(len(events)) if events.startswith(b"},", i)]
TOKENS = [b"{", b"}", b"[", b"]", b'"', b",", b":", b"\\", b"\\u00e9", b"\\ud800", b"\x00", b"\xff",
          b"\xc3", b"1e9", b"-0", b".5", b"99999999999999999999", b"null", b"true", b'""', b"NaN",
          b'"ts": 1, "ts": 2', b'"name": ""', b"[" * 70, b"]" * 70, b'{"a": ' * 70, b" " * 9]
rng = random.Random(20260521)
answered = 0
shared = {c: scanner.new_scanner(c, DROPPED_CATEGORIES) for c in (FULL, LEAN)}  # batches pile up
alone = {FULL: [], LEAN: []}  # the one-shot columns of the batches it answered


def take_and_compare(cols):
    # what the shared Scanner took is the concatenation of the one-shot columns
    import polars as pl
    got = shared[cols].take()
    if alone[cols]:
        assert scanner.to_batch(got, cols).complete.equals(pl.concat([b.complete for b in alone[cols]]))
    alone[cols] = []


for n in range(iterations):
    i = rng.randrange(len(cuts) - 1)
    a, b = cuts[i], cuts[min(len(cuts) - 1, i + rng.randint(1, 12))]
    piece = bytearray(events[a + 2:b + 1])  # whole events, from one's start to another's end
    for _ in range(rng.choice([0, 0, 1, 1, 2, 4])):
        at = rng.randint(0, max(len(piece) - 1, 0))
        how = rng.random()
        if how < 0.3 and piece:
            piece[at] = rng.randrange(256)
        elif how < 0.6:
            piece[at:at] = rng.choice(TOKENS)
        elif how < 0.8:
            del piece[at:at + rng.randint(1, 16)]
        else:
            del piece[at:]
    cols = FULL if n % 2 else LEAN
    one = scanner.scan_batch(bytes(piece), cols, DROPPED_CATEGORIES)  # any bytes: memory-safe
    if (shared[cols].scan(bytes(piece)) is not None) != (one is not None):
        raise AssertionError("a shared Scanner answered differently from a new one")
    if one is not None:
        alone[cols].append(one)
    if n % 50 == 49:
        take_and_compare(cols)
    # the reader never hands a tokenizer invalid UTF-8 (it repairs it first): compare on that
    answered += _check(bytes(piece).decode("utf-8", "replace").encode(), cols)
print("batches", iterations, "answered", answered)
"""


def _sanitizer_runtime() -> str | None:
    """The path of libasan for this compiler, or None."""
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if not shutil.which(cc):
        return None
    try:
        out = subprocess.run([cc, "-print-file-name=libasan.so"], capture_output=True, text=True,
                             timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out if out and os.path.isabs(out) and os.path.exists(out) else None


def _build(tmp_path: Path, source: Path) -> Path | str:
    """The scanner compiled with the sanitizers, or why it cannot be."""
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    target = tmp_path / ("_kscan" + sysconfig.get_config_var("EXT_SUFFIX"))
    cmd = [cc, "-shared", "-fPIC", "-O1", "-g", "-fno-omit-frame-pointer",
           "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
           f"-I{sysconfig.get_paths()['include']}", str(source), "-o", str(target)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        return f"the C compiler cannot build with -fsanitize=address,undefined: {proc.stderr[-300:]}"
    return target


def run_sanitized(tmp_path: Path, source: Path, iterations: int) -> subprocess.CompletedProcess:
    runtime = _sanitizer_runtime()
    if runtime is None:
        pytest.skip("no C compiler with an AddressSanitizer runtime (libasan) here")
    built = _build(tmp_path, source)
    if isinstance(built, str):
        pytest.skip(built)
    env = repo_env(LD_PRELOAD=runtime,
                   ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:allocator_may_return_null=1",
                   UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1")
    env.pop("PIPEAUDIT_NO_SCANNER", None)
    return subprocess.run([sys.executable, "-c", CHILD, str(built), str(REPO), str(iterations)],
                          capture_output=True, text=True, timeout=900, env=env)


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sanitizer preload: Linux only")
def test_scanner_under_asan_and_ubsan_agrees_with_msgspec(tmp_path: Path) -> None:
    proc = run_sanitized(tmp_path, SOURCE, ITERATIONS)
    report = proc.stderr[-3000:]
    assert proc.returncode == 0, report
    assert "runtime error" not in proc.stderr and "AddressSanitizer" not in proc.stderr, report
    batches, answered = (int(w) for w in proc.stdout.split()[1::2])
    assert batches == ITERATIONS and answered > ITERATIONS // 5, proc.stdout  # it answers some
