#!/usr/bin/env python3
"""Generate the bad-input corpus: ``python tests/data/bad/make_corpus.py [OUT_DIR]``.

Every case is a file or directory under ``cases/`` plus its expected outcome in
``expected.json`` (read by ``tests/cli/test_bad_inputs.py``). Outcomes:

* ``{"exit": 2, "stderr": [...]}``: an error. ``pipeaudit analyze`` prints exactly one line on
  stderr, ``pipeaudit: error: <path>: <problem>``, containing every listed substring and the
  path in ``"names"``.
* ``{"exit": 0, "findings": [...], "notes": [...]}``: the trace is readable but incomplete or
  odd: the JSON report holds these finding codes and notes containing these substrings.

The files are small, written deterministically (gzip with mtime 0), and committed, so the
corpus can be read without running this script; ``test_bad_inputs.py`` checks that running it
again gives the same bytes. Cases git cannot hold (an empty directory, a FIFO, a link to
``/dev/zero``, a file name with a newline) or should not (gigabytes of text in a megabyte of
gzip, made in a fraction of a second by :func:`gzip_repeated`) are made by
:func:`make_dynamic` at test time. Only the standard library is used. The "killed job" and
"without dur" cases change a real harness trace (``sample_traces/1f1b_p2_m4``).
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import struct
import sys
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
REAL_RUN = REPO / "sample_traces" / "1f1b_p2_m4"
T0 = 1_700_000_000_000_000  # µs since the epoch (2023-11-14)

CASES: dict[str, dict] = {}


# --------------------------------------------------------------------------- builders


def x(name, ts, dur=1, cat="cpu_op", tid=1, **args):
    e = {"ph": "X", "cat": cat, "name": name, "pid": 100, "tid": tid, "ts": ts}
    if dur is not None:
        e["dur"] = dur
    if args:
        e["args"] = args
    return e


def doc(events, rank=0, world=1, **header):
    d = {"schemaVersion": 1, "deviceProperties": [],
         "distributedInfo": {"backend": "gloo", "rank": rank, "world_size": world}}
    d.update(header)
    d["traceEvents"] = events
    d["traceName"] = "corpus"
    return d


def pipeline_rank(rank: int, world: int, order: list[str], t0: int = T0, steps: int = 1,
                  **header) -> dict:
    """A rank of a tiny annotated pipeline: ProfilerStep spans holding PP: spans with compute."""
    events = []
    t = t0
    for k in range(steps):
        events.append(x(f"ProfilerStep#{k}", t, 100 * len(order) + 50, cat="user_annotation"))
        t += 10
        for a in order:
            events.append(x(f"PP:{a}", t, 80, cat="user_annotation"))
            op = "aten::mm" if "F" in a else "autograd::engine::evaluate_function: MmBackward0"
            events.append(x(op, t + 5, 60))
            events.append(x("c10d::send" if rank == 0 and "F" in a else "c10d::recv_", t + 70, 5))
            t += 100
        t += 40
    return doc(events, rank=rank, world=world, **header)


ORDERS = {0: ["0F0", "0F1", "0B0", "0B1"], 1: ["1F0", "1B0", "1F1", "1B1"]}


def dumps(d, indent=None) -> bytes:
    return json.dumps(d, indent=indent).encode()


def gz(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=9, mtime=0)


def gzip_repeated(head: bytes, block: bytes, count: int, tail: bytes) -> bytes:
    """The gzip file of ``head + block * count + tail`` without compressing ``count`` blocks:
    after a full flush deflate forgets what came before, so one block's compressed bytes
    repeat. A gigabyte of spaces in a megabyte, in a quarter of a second."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    parts = [b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff", c.compress(head), c.flush(zlib.Z_FULL_FLUSH)]
    parts.append((c.compress(block) + c.flush(zlib.Z_FULL_FLUSH)) * count)
    parts += [c.compress(tail), c.flush(zlib.Z_FINISH)]
    crc = zlib.crc32(head)
    for _ in range(count):
        crc = zlib.crc32(block, crc)
    crc = zlib.crc32(tail, crc)
    size = len(head) + len(block) * count + len(tail)
    return b"".join(parts) + struct.pack("<II", crc, size & 0xFFFFFFFF)


# --------------------------------------------------------------------------- writing


def case(name: str, path: str, expected: dict, args: list[str] | None = None) -> None:
    """Register a case: ``path`` (relative to cases/) is what analyze gets."""
    CASES[name] = {"path": path, "args": args or [], **expected}
    if HOSTILE:
        CASES[name]["hostile"] = True


#: Set while the cases of issue 21's table are registered (they also run through real
#: processes, with and without the compiled scanner, timed and measured).
HOSTILE: list[bool] = []


def err(*substrings: str, names: str | None = None) -> dict:
    return {"exit": 2, "stderr": list(substrings), **({"names": names} if names else {})}


def ok(*findings: str, notes: list[str] | None = None) -> dict:
    return {"exit": 0, "findings": list(findings), "notes": notes or []}


def write(root: Path, rel: str, data: bytes | str | dict) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, dict):
        data = dumps(data)
    if isinstance(data, str):
        data = data.encode()
    p.write_bytes(data)


def build(root: Path) -> None:
    good = dumps(pipeline_rank(0, 1, ["0F0", "0B0"]), indent=1)
    one = doc([x("ProfilerStep#0", T0, 500, cat="user_annotation"), x("aten::mm", T0 + 10, 50)])

    # -- nothing, or not JSON
    write(root, "empty.json", b"")
    case("empty file", "empty.json", err("empty file"), )
    write(root, "whitespace.json", b"  \n\t\n")
    case("only whitespace", "whitespace.json", err("empty file (only whitespace)"))
    write(root, "not_json.json", "this is not a trace\n")
    case("not JSON", "not_json.json", err("not JSON"))
    write(root, "html.json", "<html><body>502 Bad Gateway</body></html>\n")
    case("an HTML error page saved as a trace", "html.json", err("not JSON"))
    write(root, "binary.json", bytes(range(256)))
    case("binary garbage", "binary.json", err("not JSON"))

    # -- truncated JSON (a killed job, a full disk)
    text = good
    write(root, "truncated_mid_event.json", text[: text.index(b'"PP:0B0"') - 30])
    case("truncated mid-event", "truncated_mid_event.json",
         err("truncated JSON", "pass --salvage"))
    write(root, "truncated_mid_string.json", text[: text.index(b'"PP:0B0"') + 4])
    case("truncated mid-string", "truncated_mid_string.json", err("truncated JSON", "pass --salvage"))
    num = text.index(b'"ts": ', text.index(b'"PP:0B0"')) + 9
    write(root, "truncated_mid_number.json", text[:num])
    case("truncated mid-number", "truncated_mid_number.json", err("truncated JSON", "pass --salvage"))
    write(root, "truncated_in_header.json", text[:40])
    case("truncated in the header", "truncated_in_header.json", err("truncated JSON", "pass --salvage"))
    write(root, "zero_filled.json", text[: len(text) // 2] + b"\0" * 2048)
    case("zero-filled tail (full disk)", "zero_filled.json",
         err("are zeros: the file was cut short", "pass --salvage"))
    write(root, "trailing_garbage.json", text + b"\n]]}garbage")
    case("trailing garbage after the document", "trailing_garbage.json",
         err("invalid JSON: trailing characters", "pass --salvage"))

    # -- gzip problems
    data = gz(good)
    write(root, "truncated.json.gz", data[: len(data) * 2 // 3])
    case("truncated gzip", "truncated.json.gz",
         err("truncated gzip file (the compressed stream ends early)", "pass --salvage"))
    bad = bytearray(data)
    for i in range(20, 40):
        bad[i] ^= 0xA5
    write(root, "corrupt.json.gz", bytes(bad))
    case("corrupt gzip", "corrupt.json.gz", err("corrupt gzip data ("))
    crc = bytearray(data)
    crc[-8] ^= 0xFF  # the CRC32 in the gzip trailer
    write(root, "bad_checksum.json.gz", bytes(crc))
    case("gzip checksum mismatch", "bad_checksum.json.gz", err("corrupt gzip data (", "incorrect data check"))
    write(root, "double_gzip.json.gz", gz(data))
    case("gzip-compressed twice", "double_gzip.json.gz", err("not JSON: the file is gzip-compressed twice"))
    import bz2
    write(root, "bzip2.json.gz", bz2.compress(good, 9))
    case("bzip2 named .gz (compressed wrongly)", "bzip2.json.gz", err("not JSON: the file is bzip2-compressed"))
    write(root, "empty_gzip.json.gz", gz(b""))
    case("gzip of nothing", "empty_gzip.json.gz", err("empty file (the gzip stream holds no data)"))
    write(root, "not_gzip.json.gz", "rank 0 died before its profiler wrote\n")
    case("a .json.gz that is not gzip", "not_gzip.json.gz",
         err("not gzip: the name ends in .gz, but the file is neither gzip nor JSON"))

    # -- valid JSON that is not a trace
    write(root, "list.json", "[1, 2, 3]")
    case("a JSON list", "list.json", err("not a trace: the JSON is a list"))
    write(root, "number.json", "42")
    case("a JSON number", "number.json", err("not a trace: the JSON is a number"))
    write(root, "no_trace_events.json", {"schemaVersion": 1, "events": []})
    case("no traceEvents", "no_trace_events.json", err("not a trace: the JSON object has no traceEvents"))
    write(root, "trace_events_not_list.json", {"traceEvents": {"0": {"ph": "X"}}})
    case("traceEvents not a list", "trace_events_not_list.json",
         err("not a trace: traceEvents is an object, expected a list of events"))
    write(root, "event_not_object.json", {"traceEvents": [x("a", T0, 1), "oops"]})
    case("an event that is not an object", "event_not_object.json",
         err("wrong type in traceEvents[1]: expected `object`, got `str`"))

    # -- events with wrong types or values
    def with_event(e: dict) -> dict:
        return doc([x("ProfilerStep#0", T0, 500, cat="user_annotation"), e])

    write(root, "ts_string.json", with_event(x("aten::mm", str(T0 + 5), 3)))
    case("string ts", "ts_string.json", err("traceEvents[1] ('aten::mm'): ts is a string"))
    write(root, "dur_null.json", with_event(x("aten::mm", T0 + 5, None) | {"dur": None}))
    case("null dur", "dur_null.json", err("traceEvents[1] ('aten::mm'): dur is null"))
    write(root, "dur_negative.json", with_event(x("aten::mm", T0 + 5, -3)))
    case("negative dur (event dropped)", "dur_negative.json",
         ok("NO_PIPELINE", notes=["1 complete events with negative dur dropped"]))
    write(root, "ts_missing.json", with_event({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "dur": 3}))
    case("missing ts (event dropped)", "ts_missing.json",
         ok("NO_PIPELINE", notes=["1 complete events without ts dropped"]))
    nan = dumps(with_event(x("aten::mm", T0 + 5, 3))).replace(b'"dur": 3', b'"dur": NaN')
    write(root, "dur_nan.json", nan)
    case("NaN dur", "dur_nan.json", err("traceEvents[1] ('aten::mm'): dur is NaN", "not valid JSON"))
    inf = dumps(with_event(x("aten::mm", T0 + 5, 3))).replace(f'"ts": {T0 + 5}'.encode(), b'"ts": Infinity')
    write(root, "ts_infinity.json", inf)
    case("Infinity ts", "ts_infinity.json", err("ts is Infinity", "not valid JSON"))
    write(root, "ts_huge.json", with_event(x("aten::mm", 10**30, 3)))
    case("huge integer ts", "ts_huge.json", err("traceEvents[1] ('aten::mm'): ts is out of range"))
    write(root, "args_huge.json", with_event(x("aten::mm", T0 + 5, 3, correlation=2**80)))
    case("huge integer in args (set to null)", "args_huge.json",
         ok("NO_PIPELINE", notes=["non-integer args.correlation (set to null)"]))
    write(root, "name_not_string.json", with_event(x(12, T0 + 5, 3)))
    case("numeric event name", "name_not_string.json",
         err("wrong type in traceEvents[1].name: expected `str`, got `int`"))
    write(root, "non_utf8_name.json",
          dumps(with_event(x("aten::mmXX", T0 + 5, 3))).replace(b"mmXX", b"mm\xff\xfe"))
    case("non-UTF-8 bytes in a name (replaced)", "non_utf8_name.json",
         ok("NO_PIPELINE", notes=["invalid UTF-8 byte sequences in strings replaced by U+FFFD"]))
    write(root, "bad_distributed_info.json", doc([]) | {"distributedInfo": {"rank": "zero"}})
    case("distributedInfo.rank not an integer", "bad_distributed_info.json",
         err("distributedInfo.rank is 'zero' (str), expected an integer >= 0"))
    write(root, "rank_not_below_world.json", doc([], rank=4, world=4))
    case("rank not below its own world_size", "rank_not_below_world.json",
         err("distributedInfo.rank 4 is not below its world_size 4"))

    # -- readable traces without a (complete) pipeline
    write(root, "no_events.json", doc([]))
    case("no events at all", "no_events.json", ok("NO_PIPELINE", notes=["the trace has no events"]))
    write(root, "events_no_pipeline.json", one)
    case("events but no pipeline", "events_no_pipeline.json", ok("NO_PIPELINE"))
    write(root, "begin_end_events.json",
          doc([{"ph": "B", "name": "step", "pid": 1, "tid": 1, "ts": T0},
               {"ph": "E", "name": "step", "pid": 1, "tid": 1, "ts": T0 + 9}]))
    case("another framework's B/E events", "begin_end_events.json",
         ok("NO_PIPELINE", notes=["2 begin/end events (ph B/E) ignored"]))
    garbage = [x("ProfilerStep#0", T0, 900, cat="user_annotation")] + [
        x(n, T0 + 10 * i + 10, 5, cat="user_annotation") for i, n in enumerate(
            ["PP:99999999999999999999F0", "PP:0F99999999999999999999", "PP:(0F;x)OVERLAP_F_B",
             "PP:()OVERLAP_F_B", "PP:-1F0", "Forward 99999999999999999999", "ProfilerStep#99999999999999999999",
             "PP:0X0", "PP:", "Backward -1"])]
    write(root, "pp_garbage_names.json", doc(garbage))
    case("names that look like PP: annotations with garbage", "pp_garbage_names.json", ok("NO_PIPELINE"))

    def run_dir(rel: str, ranks: dict[int, dict]) -> None:
        for r, d in ranks.items():
            write(root, f"{rel}/rank{r}.json", d)

    orders = {r: list(o) for r, o in ORDERS.items()}
    run_dir("pipeline_ok", {r: pipeline_rank(r, 2, o) for r, o in orders.items()})
    case("a complete tiny pipeline (control)", "pipeline_ok", ok())
    missing = {r: list(o) for r, o in ORDERS.items()}
    missing[1].remove("1B1")
    run_dir("missing_microbatch", {r: pipeline_rank(r, 2, o) for r, o in missing.items()})
    case("a pipeline missing a microbatch's backward", "missing_microbatch", ok("MISSING_ACTIONS"))
    dup = {r: list(o) for r, o in ORDERS.items()}
    dup[0].append("0F1")
    run_dir("duplicated_action", {r: pipeline_rank(r, 2, o) for r, o in dup.items()})
    case("a pipeline running an action twice", "duplicated_action", ok("DUPLICATED_ACTIONS"))

    run_dir("partial_run", {0: pipeline_rank(0, 2, ORDERS[0], steps=2),
                            1: pipeline_rank(1, 2, ORDERS[1], steps=2, pipeaudit_incomplete_step=1)})
    case("a failed harness run: one rank's partial trace (cut step marked)", "partial_run",
         ok("PARTIAL_TRACE", notes=["steps after ProfilerStep#0 are excluded on every rank"]))
    write(root, "partial_first_step/partial-rank0.json",
          pipeline_rank(0, 1, ["0F0", "0B0"], pipeaudit_incomplete_step=0))
    case("a partial trace stopped in its first step", "partial_first_step",
         err("stopped rank 0 during ProfilerStep#0, before any step was complete"))
    write(root, "other_framework.json", {"displayTimeUnit": "ns", "traceEvents": [
        {"ph": "X", "name": "XlaModule:#jit_train_step#", "pid": 7, "tid": 3, "ts": T0, "dur": 900},
        {"ph": "X", "name": "fusion.12", "pid": 7, "tid": 4, "ts": T0 + 5, "dur": 40},
        {"ph": "M", "name": "process_name", "pid": 7, "args": {"name": "/device:TPU:0"}}]})
    case("another framework's Chrome trace", "other_framework.json", ok("NO_PIPELINE"))

    # -- sets of files that do not form one run
    run_dir("duplicate_ranks", {0: pipeline_rank(0, 2, ORDERS[0])})
    write(root, "duplicate_ranks/rank0_again.json", pipeline_rank(0, 2, ORDERS[0]))
    case("the same rank twice", "duplicate_ranks", err("rank 0 is in two files"))
    write(root, "two_runs_world/rank0.json", pipeline_rank(0, 2, ORDERS[0]))
    write(root, "two_runs_world/rank1.json", pipeline_rank(1, 4, ORDERS[1]))
    case("ranks of two runs (world sizes differ)", "two_runs_world",
         err("traces come from different runs: world_size 2 in"))
    write(root, "two_runs_time/rank0.json", pipeline_rank(0, 2, ORDERS[0]))
    write(root, "two_runs_time/rank1.json", pipeline_rank(1, 2, ORDERS[1], t0=T0 + 3 * 3600 * 10**6))
    case("ranks of two runs (hours apart)", "two_runs_time",
         err("traces come from different runs or profiling windows", "3.0 h apart"))
    run_dir("world_larger", {r: pipeline_rank(r, 4, ORDERS[r]) for r in (0, 1)})
    case("world size larger than the files given", "world_larger",
         ok("MISSING_RANKS", notes=["world_size is 4 but only ranks 0, 1 were given; missing ranks 2, 3"]))
    run_dir("missing_ranks", {0: pipeline_rank(0, 4, ORDERS[0]),
                              2: pipeline_rank(2, 4, ["2F0", "2B0", "2F1", "2B1"])})
    case("missing ranks (a hole)", "missing_ranks",
         err("missing ranks 1, 3", "--allow-missing"))
    case("missing ranks with --allow-missing", "missing_ranks",
         ok("MISSING_RANKS", notes=["missing ranks 1, 3"]), args=["--allow-missing"])
    write(root, "rank_beyond_world/rank0.json", pipeline_rank(0, 2, ORDERS[0]))
    write(root, "rank_beyond_world/rank5.json", {"traceEvents": [x("aten::mm", T0, 5)]})
    case("a rank beyond the world size", "rank_beyond_world", err("is not below world_size 2"))
    write(root, "ranks_unknown/host_a.1.pt.trace.json", {"traceEvents": [x("aten::mm", T0, 5)]})
    write(root, "ranks_unknown/host_b.2.pt.trace.json", {"traceEvents": [x("aten::mm", T0, 5)]})
    case("several files without ranks", "ranks_unknown", err("cannot tell the ranks apart"))

    # -- paths
    write(root, "no_traces/config.json", {"lr": 0.1})
    write(root, "no_traces/notes.txt", "nothing here\n")
    case("a directory with no traces", "no_traces", err("no trace files in this directory or below"))
    write(root, "no_readable_traces/rank0.json.gz", "not gzip\n")
    write(root, "no_readable_traces/rank1.json", "<html>a saved web page</html>\n")
    case("a directory whose trace files are none of them traces", "no_readable_traces",
         err("no trace files in this directory or below", "not taken: rank0.json.gz (not gzip, "
             "nor JSON); rank1.json (not JSON)"))
    case("a path that does not exist", "does_not_exist.json", err("no such file or directory"))
    case("a glob that matches nothing", "*.nothing", err("no files match this pattern"))
    for link in ("loop_a.json", "loop_b.json"):
        if os.path.lexists(root / link):
            os.unlink(root / link)
    os.symlink("loop_b.json", root / "loop_a.json")
    os.symlink("loop_a.json", root / "loop_b.json")
    case("a symlink loop", "loop_a.json", err("symlink loop"))
    if os.path.lexists(root / "dangling.json"):
        os.unlink(root / "dangling.json")
    os.symlink("gone.json", root / "dangling.json")
    case("a dangling symlink", "dangling.json", err("broken symlink"))
    write(root, "unreadable/rank0.json", one)
    case("an unreadable file (permission denied, simulated)", "unreadable/rank0.json",
         err("permission denied") | {"deny": "unreadable/rank0.json"})
    case("an empty directory (made at test time)", "empty_dir", err("empty directory"))
    write(root, "bad_manifest/rank0.json", pipeline_rank(0, 2, ORDERS[0]))
    write(root, "bad_manifest/rank1.json", pipeline_rank(1, 2, ORDERS[1]))
    write(root, "bad_manifest/manifest.json", "{not json")
    case("a broken manifest.json next to good traces", "bad_manifest", ok(notes=["manifest ignored"]))

    # -- a killed job: a real harness run whose rank 1 trace was cut while being written
    if REAL_RUN.is_dir():
        for name in ("manifest.json", "rank0.json.gz"):
            write(root, f"killed_job/{name}", (REAL_RUN / name).read_bytes())
        r1 = (REAL_RUN / "rank1.json.gz").read_bytes()
        write(root, "killed_job/rank1.json.gz", r1[: int(len(r1) * 0.85)])
    case("a killed job (truncated gzip) without --salvage", "killed_job",
         err("rank1.json.gz: truncated gzip file", "pass --salvage"))
    case("a killed job with --salvage", "killed_job",
         ok("TRUNCATED_TRACE", notes=["steps after ProfilerStep#0 are excluded on every rank"]),
         args=["--salvage"])
    hostile(root)


def hostile(root: Path) -> None:
    """Issue 21's table: inputs that hung, grew without bound, crashed, or were read
    differently by the two decoders. Each ends in exit 0 or 2 with one line, in seconds."""
    HOSTILE.append(True)
    try:
        _hostile(root)
    finally:
        HOSTILE.clear()


def _hostile(root: Path) -> None:
    # -- not regular files, links that loop (FIFOs and device links: make_dynamic)
    case("a FIFO named like a trace in a run directory (skipped)", "fifo_run", ok())
    case("a FIFO given by name", "fifo_run/rank2.json", err("is a FIFO (named pipe), not a regular file"))
    case("a FIFO matched by a glob", "fifo_run/rank*", err("rank2.json: is a FIFO (named pipe)"))
    case("a link to /dev/zero in a run directory (skipped)", "devzero_run", ok())
    case("a link to /dev/zero given by name", "devzero_run/rank2.json",
         err("is a character device, not a regular file"))
    case("a link to /dev/zero matched by a glob", "devzero_run/rank*",
         err("rank2.json: is a character device, not a regular file"))
    write(root, "symlinked_dirs/rank0.json", pipeline_rank(0, 1, ["0F0", "0B0"]))  # links: make_dynamic
    case("a ** glob over links to . (not followed)", "symlinked_dirs/**/rank*.json", ok())
    # -- bounded time and memory per byte (made at test time: make_dynamic)
    case("1 GiB of spaces inside traceEvents (1 MB of gzip)", "spaces.json.gz",
         ok("NO_PIPELINE", notes=["the trace has no events"]))
    case("1 GiB of zero bytes (1 MB of gzip)", "zeros.json.gz",
         err("not JSON: the file holds only zero bytes (1,073,741,824)"))
    case("an event name of 512 MiB (512 KB of gzip)", "big_name.json.gz",
         err("traceEvents[0] (from byte 16) is larger than 64 MiB"))
    case("an event name of 1 GiB that is not UTF-8 (1 MB of gzip)", "not_utf8_name.json.gz",
         err("more than 200,000 invalid UTF-8 byte sequences"))
    # -- never a silent wrong number: X events without dur are set aside and counted
    if REAL_RUN.is_dir():
        real = json.loads(gzip.decompress((REAL_RUN / "rank1.json.gz").read_bytes()))
        for e in real["traceEvents"]:
            if e.get("name") == "PP:1B2":
                e.pop("dur", None)
        write(root, "without_dur/rank1.json.gz", gz(dumps(real)))
        for name in ("manifest.json", "rank0.json.gz"):
            write(root, f"without_dur/{name}", (REAL_RUN / name).read_bytes())
    case("the two PP:1B2 spans of a real run without dur", "without_dur",
         ok("MISSING_ACTIONS", notes=["rank 1 (rank1.json.gz): 2 complete events without dur (their "
                                      "end is unknown) dropped (the first: 'PP:1B2')"]))
    # -- one answer from both decoders
    event = x("PP:0F0", T0, 5, cat="user_annotation")
    write(root, "two_event_arrays.json",
          dumps(doc([event])).replace(b', "traceName"', b', "traceEvents": [], "traceName"'))
    case("two traceEvents arrays", "two_event_arrays.json",
         err("the key 'traceEvents' appears twice at the top level"))
    meta = dumps(doc([event, {"ph": "M", "name": "thread_nameXX", "pid": 1, "tid": 1}]))
    write(root, "metadata_not_utf8.json", meta.replace(b"nameXX", b"name\xff\xfe"))
    case("invalid UTF-8 in a metadata event's name (noted by both decoders)", "metadata_not_utf8.json",
         ok("NO_PIPELINE", notes=["2 invalid UTF-8 byte sequences in strings replaced by U+FFFD"]))
    # How deep msgspec goes depends on the Python version (under 1,000 levels on 3.11, some
    # thousands on 3.12): 100,000 is past every version's limit, 200 within all of them and
    # past the compiled scanner's 64 (which hands that batch to msgspec)
    for depth, rel, outcome in ((100_000, "deep_args.json.gz", err("nested too deeply")),
                                (200, "deep_args_200.json", ok("NO_PIPELINE"))):
        nested = b"[" * depth + b"]" * depth
        text = dumps(doc([x("aten::mm", T0, 5)])).replace(
            b'"cpu_op"', b'"cpu_op", "args": {"x": ' + nested + b"}")
        write(root, rel, gz(text) if rel.endswith(".gz") else text)
        case(f"args nested {depth:,} deep", rel, outcome)
    write(root, "deep_header.json.gz",
          gz(b'{"meta": ' + b"[" * 200_000 + b"]" * 200_000 + b', "traceEvents": []}'))
    case("a header member nested 200,000 deep", "deep_header.json.gz",
         err("nested too deeply", "in the top-level member 'meta'"))
    many = dumps(doc([x(f"op{i}", T0 + i, 1) for i in range(20_000)] + [x("lastXX", T0 + 20_000, 1)]))
    write(root, "last_name_not_utf8.json.gz", gz(many.replace(b"lastXX", b"last\xff")))
    case("invalid UTF-8 in the last event, a key after the events, --max-memory 1M",
         "last_name_not_utf8.json.gz",
         ok("NO_PIPELINE", notes=["1 invalid UTF-8 byte sequences in strings replaced by U+FFFD"]),
         args=["--max-memory", "1M"])
    # -- messages: the file's own byte offsets, one line, the encoding named
    text = dumps(doc([x("aXX", T0, 1), x("b" * 250_000, T0 + 1, 1)])).replace(b"aXX", b"\xff" * 100_000)
    text = text.replace(b'"dur": 1}], "traceName"', b'"dur": 1.x}], "traceName"')
    write(root, "not_utf8_then_bad_number.json.gz", gz(text))
    case("100k invalid UTF-8 bytes, then a broken number", "not_utf8_then_bad_number.json.gz",
         err(f"invalid JSON: invalid number (byte {text.index(b'1.x') + 2})"))
    write(root, "utf16.json", json.dumps(doc([event])).encode("utf-16"))
    case("a trace in UTF-16", "utf16.json", err("the text is UTF-16LE, JSON files are UTF-8"))
    case("a file name with a newline (one line all the same)", "new\nline.json", err("not JSON"))


def make_dynamic(root: Path) -> None:
    """Cases git cannot hold (an empty directory, a FIFO, a device link, a name with a
    newline) or should not (gigabytes of text; links to ``.``, which make pytest's own
    collection walk endless)."""
    (root / "empty_dir").mkdir(exist_ok=True)
    for link in ("a", "b"):  # not committed: a directory walk that follows links never ends
        if not os.path.lexists(root / "symlinked_dirs" / link):
            os.symlink(".", root / "symlinked_dirs" / link)
    for name, special in (("fifo_run", None), ("devzero_run", "/dev/zero")):
        d = root / name
        d.mkdir(exist_ok=True)
        for f in (root / "pipeline_ok").iterdir():
            shutil.copy(f, d / f.name)
        target = d / "rank2.json"
        if not os.path.lexists(target):
            if special is None:
                os.mkfifo(target)
            else:
                os.symlink(special, target)
    gib = 1 << 30
    (root / "spaces.json.gz").write_bytes(
        gzip_repeated(b'{"traceEvents":[', b" " * (1 << 20), gib >> 20, b"]}"))
    (root / "zeros.json.gz").write_bytes(gzip_repeated(b"", b"\0" * (1 << 20), gib >> 20, b""))
    (root / "big_name.json.gz").write_bytes(gzip_repeated(
        b'{"traceEvents":[{"ph":"X","name":"', b"a" * (1 << 20), 512, b'","ts":1,"dur":1}]}'))
    (root / "not_utf8_name.json.gz").write_bytes(gzip_repeated(
        b'{"traceEvents":[{"ph":"X","name":"', b"\xff" * (1 << 20), gib >> 20, b'","ts":1,"dur":1}]}'))
    (root / "new\nline.json").write_bytes(b"not a trace\n")


def main(out: Path) -> None:
    cases = out / "cases"
    if cases.exists():
        shutil.rmtree(cases)
    cases.mkdir(parents=True)
    CASES.clear()
    build(cases)
    (out / "expected.json").write_text(json.dumps(CASES, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
