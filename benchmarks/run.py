"""Benchmark: pipeaudit analyze against the decode floor and HTA, on real harness traces.

    python benchmarks/make_traces.py            # once: the trace sets, into benchmarks/data/
    python benchmarks/run.py                    # main comparison + scaling tables
    python benchmarks/run.py --hta-python /path/to/venv/bin/python   # with HTA
    python benchmarks/run.py --quick            # main comparison only
    python benchmarks/run.py --jobs-only        # the --jobs scaling table only

Every measurement runs in a fresh process. Wall time is timed unwatched (``--repeat`` runs,
round-robin; the fastest kept); one more run of each method is watched from outside for CPU
time and memory of the whole process tree (the analysis, its forkserver and pool workers),
sampled from /proc every 20 ms (watching slows the run it watches, so its wall time is not
used). HTA's load is timed once, unwatched. "peak RSS" is the largest single process;
"RSS sum" the largest total of the tree at one moment, which counts shared pages (the
polars library, the forkserver's preloaded modules) once per process; "PSS sum" counts
them once in all (proportional set size): what the machine must really hold. CPU
time sums every process of the tree (the last < 20 ms of a worker may be missed).
``ru_maxrss`` of RUSAGE_CHILDREN is printed too: it sees the direct children only (not the
workers of a forkserver, which are its grandchildren).

Methods (MB/s are MB of *uncompressed* JSON per second of wall time):

* ``floor``        read + gunzip (ISA-L) + typed msgspec decode of the fields ``analyze``
                   reads (the lean Structs of ``pipeaudit.trace.schema``), rank after rank in one
                   process: the practical floor of pure-Python decoding.
* ``floor-zlib``   the same with the standard library's zlib.
* ``decode-scan``  read + gunzip + the compiled scanner (``pipeaudit.trace.scanner``) to the
                   analysis columns, rank after rank in one process: the floor without
                   a Python object per event.
* ``analyze``      ``pipeaudit analyze DIR --format json`` end to end (default jobs: cores).
* ``analyze-msgspec`` the same with the compiled scanner off (``PIPEAUDIT_NO_SCANNER=1``).
* ``analyze-j1``   the same with ``--jobs 1``; ``analyze-j2`` with ``--jobs 2``.
* ``baseline``     ``analyze`` of another source tree (``--baseline``), e.g. before a change.
* ``hta-load``     HTA ``TraceAnalysis(trace_dir=...)`` (its parser and process pool).
* ``hta-breakdown`` HTA load + ``get_temporal_breakdown()``.

The last table puts ``--jobs 1`` against ``--jobs 2`` on size_x4, ranks_8 and large_r8,
end to end and for the ranks phase alone (decode + reduction of every rank, the part the
jobs run in parallel), read from analyze's ``PIPEAUDIT_TIMINGS`` line. The VM's stolen
CPU time during the run is printed at the end: above a few percent, timings are noisy.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DATA = HERE / "data"
PAGE = os.sysconf("SC_PAGE_SIZE")
#: The decode + reduction of every rank (the part --jobs runs in parallel) in analyze's
#: PIPEAUDIT_TIMINGS line.
_RANKS_PHASE = re.compile(r"pipeaudit timings: .*?ranks ([0-9.]+) s")
_START_PHASE = re.compile(r"pipeaudit timings: start ([0-9.]+) s")
TICK = os.sysconf("SC_CLK_TCK")


# --------------------------------------------------------------------------- children

_FLOOR = """
import sys, zlib
sys.path.insert(0, {root!r})
from pathlib import Path
import msgspec
from isal import isal_zlib
from pipeaudit.trace.schema import LeanEvent

class Floor(msgspec.Struct, gc=False):  # the lean Structs analyze decodes, whole file at once
    traceEvents: list[LeanEvent]

DECODER = msgspec.json.Decoder(Floor)
files = {files!r}
n = 0
for f in files:
    raw = Path(f).read_bytes()
    gunzip = zlib if {zlib!r} else isal_zlib
    data = gunzip.decompressobj(wbits=31).decompress(raw) if raw[:2] == b"\\x1f\\x8b" else raw
    n += len(DECODER.decode(data).traceEvents)
    del data, raw
print(n)
"""

_SCAN = """
import sys
sys.path.insert(0, {root!r})
from pipeaudit.timeline.build import REDUCE_COLUMNS
from pipeaudit.trace import ReadOptions, Tokenizer, scanner
from pipeaudit.trace.decode import decode_file
assert scanner.available(), "the compiled scanner is not built"
OPTIONS = ReadOptions.for_budget(None, tokenizer=Tokenizer.SCANNER)
n = 0
for f in {files!r}:
    n += decode_file(f, OPTIONS, columns=REDUCE_COLUMNS).events.height
print(n)
"""

_HTA = """
import sys, warnings
warnings.filterwarnings("ignore")
from hta.trace_analysis import TraceAnalysis
a = TraceAnalysis(trace_dir={d!r})
if {breakdown!r}:
    try:
        print(a.get_temporal_breakdown(visualize=False).to_string())
    except Exception as exc:
        print("BREAKDOWN-FAILED", type(exc).__name__, exc)
        sys.exit(3)
"""


BASELINE: str | None = None  # --baseline: a pipeaudit source tree to compare with


def rank_files(d: Path) -> list[Path]:
    """A set's rank files: ``rank*.json.gz``, or plain ``rank*.json`` (a ``<set>_json`` set)."""
    return sorted(d.glob("rank*.json.gz")) or sorted(d.glob("rank*.json"))


def _command(method: str, d: Path, hta_python: str | None) -> list[str] | None:
    files = [str(p) for p in rank_files(d)]
    py = sys.executable
    if method in ("floor", "floor-zlib"):
        return [py, "-c", _FLOOR.format(root=str(ROOT), files=files, zlib=method == "floor-zlib")]
    if method.startswith("baseline"):
        if not BASELINE:
            return None
        code = ("import sys; sys.path.insert(0, %r); sys.argv = ['pipeaudit', 'analyze', %r, "
                "'--format', 'json']; from pipeaudit.cli.main import main; main()") % (BASELINE, str(d))
        return [py, "-c", code]
    if method == "decode-scan":
        return [py, "-c", _SCAN.format(root=str(ROOT), files=files)]
    if method == "analyze-msgspec":  # the compiled scanner turned off
        return ["env", "PIPEAUDIT_NO_SCANNER=1", py, "-m", "pipeaudit", "analyze", str(d), "--format", "json"]
    if method.startswith("analyze"):
        cmd = [py, "-m", "pipeaudit", "analyze", str(d), "--format", "json"]
        if method != "analyze":
            cmd += ["--jobs", method.split("-j")[1]]
        return cmd
    if method.startswith("hta"):
        if not hta_python:
            return None
        hd = DATA / f"hta_{d.name}"  # rank files only (HTA would try to parse manifest.json)
        hd.mkdir(exist_ok=True)
        for f in files:
            link = hd / Path(f).name
            if not link.exists():
                link.symlink_to(f)
        return [hta_python, "-c", _HTA.format(d=str(hd), breakdown=method == "hta-breakdown")]
    raise ValueError(method)


# --------------------------------------------------------------------------- watching


def _tree(root: int) -> list[int]:
    """``root`` and its descendants (from /proc/*/stat parent links)."""
    parent: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2:].split()[1])
        parent.setdefault(ppid, []).append(int(name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(parent.get(pid, []))
    return out


def _pss(pid: int) -> int:
    """Proportional set size (bytes): shared pages (libpolars, the forkserver's preloaded
    modules) counted once across the processes that share them."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as fh:
            for line in fh:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _sample(pid: int) -> tuple[int, float, int] | None:
    """(RSS bytes, CPU seconds, PSS bytes) of one process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
        with open(f"/proc/{pid}/statm", "rb") as fh:
            rss = int(fh.read().split()[1]) * PAGE
    except OSError:
        return None
    fields = stat[stat.rindex(b")") + 2:].split()
    return rss, (int(fields[11]) + int(fields[12])) / TICK, _pss(pid)


def timed(cmd: list[str]) -> dict:
    """Run ``cmd`` unwatched: its wall time alone (no sampling thread competing for the
    cores), the return code and the output."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               PIPEAUDIT_TIMINGS="1")
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, env=env, cwd=ROOT)
    wall = time.perf_counter() - t0
    err = proc.stderr.decode(errors="replace")
    phase, start = _RANKS_PHASE.search(err), _START_PHASE.search(err)
    return {"rc": proc.returncode, "wall_s": wall,
            "ranks_s": float(phase.group(1)) if phase else None,
            "start_s": float(start.group(1)) if start else None,
            "stdout": proc.stdout.decode(errors="replace")[-2000:], "stderr": err[-2000:]}


def measure(cmd: list[str]) -> dict:
    """Run ``cmd`` and watch its process tree; return the figures."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               PIPEAUDIT_TIMINGS="1")  # analyze's phases on stderr (pipeaudit.timings)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT)
    cpu: dict[int, float] = {}
    peak_one = peak_sum = peak_pss = 0
    stop = threading.Event()

    def watch() -> None:
        nonlocal peak_one, peak_sum, peak_pss
        while not stop.is_set():
            total = pss = 0
            for pid in _tree(proc.pid):
                s = _sample(pid)
                if s is None:
                    continue
                total += s[0]
                pss += s[2]
                peak_one = max(peak_one, s[0])
                cpu[pid] = max(cpu.get(pid, 0.0), s[1])
            peak_sum = max(peak_sum, total)
            peak_pss = max(peak_pss, pss)
            stop.wait(0.02)

    out, err, wall = communicate_watched(proc, watch, stop, t0)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    children_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    phase = _RANKS_PHASE.search(err.decode(errors="replace"))
    start = _START_PHASE.search(err.decode(errors="replace"))
    return {
        "rc": proc.returncode, "wall_s": wall, "cpu_s": max(sum(cpu.values()), children_cpu),
        "ranks_s": float(phase.group(1)) if phase else None,
        "start_s": float(start.group(1)) if start else None,
        "peak_rss_mb": peak_one / 1e6, "peak_sum_mb": peak_sum / 1e6, "peak_pss_mb": peak_pss / 1e6,
        "ru_maxrss_children_mb": after.ru_maxrss / 1e3, "stdout": out.decode(errors="replace")[-2000:],
        "stderr": err.decode(errors="replace")[-2000:],
    }


def json_bytes(d: Path) -> tuple[int, int, int]:
    """(total JSON bytes, largest rank's JSON bytes, ranks) of a trace set."""
    import gzip

    sizes = []
    for f in rank_files(d):
        if f.suffix != ".gz":
            sizes.append(f.stat().st_size)
            continue
        n = 0
        with gzip.open(f, "rb") as fh:
            while chunk := fh.read(1 << 24):
                n += len(chunk)
        sizes.append(n)
    return sum(sizes), max(sizes), len(sizes)


def best_of(method: str, d: Path, repeat: int, hta_python: str | None) -> dict | None:
    return best_of_many([method], d, repeat, hta_python)[method]


def best_of_many(methods: list[str], d: Path, repeat: int, hta_python: str | None) -> dict[str, dict | None]:
    """Time each method ``repeat`` times unwatched, round-robin (so that a change in the
    machine's load hits every method alike), and watch it once more for its CPU time and
    memory (the 20 ms sampling of /proc, PSS included, takes CPU from the run it watches:
    more from a run of several processes than from the one-process floor). Keeps the fastest
    wall time, the lowest CPU time and the highest memory. HTA's load is timed once and not
    watched (its memory is not reported)."""
    cmds = {m: _command(m, d, hta_python) for m in methods}
    runs: dict[str, list[dict]] = {m: [] for m in methods}
    watched: dict[str, list[dict]] = {m: [] for m in methods}
    for i in range(repeat):
        for m in methods:
            if cmds[m] is not None and (i == 0 or not m.startswith("hta")):
                runs[m].append(timed(cmds[m]))  # type: ignore[arg-type]
    for m in methods:
        if cmds[m] is not None and not m.startswith("hta"):
            watched[m].append(measure(cmds[m]))  # type: ignore[arg-type]
    out: dict[str, dict | None] = {}
    for m in methods:
        if cmds[m] is None:
            out[m] = None
            continue
        ok = [r for r in runs[m] if r["rc"] == 0]
        seen = [r for r in watched[m] if r["rc"] == 0]
        if not ok or (watched[m] and not seen):
            r = (runs[m] + watched[m])[-1]
            r["failed"] = (r["stdout"].strip().splitlines() or r["stderr"].strip().splitlines() or ["?"])[-1][:160]
            out[m] = r
            continue
        best = dict(min(ok, key=lambda r: r["wall_s"]))
        best["walls_s"] = sorted(r["wall_s"] for r in ok)
        best["median_s"] = statistics.median(best["walls_s"])
        if not seen:  # HTA: wall time only
            best.update(cpu_s=float("nan"), peak_rss_mb=float("nan"), peak_sum_mb=float("nan"),
                        peak_pss_mb=float("nan"))
            out[m] = best
            continue
        best["cpu_s"] = min(r["cpu_s"] for r in seen)
        phases = [r["ranks_s"] for r in ok if r["ranks_s"] is not None]
        best["ranks_s"] = min(phases) if phases else None
        starts = [r["start_s"] for r in ok if r.get("start_s") is not None]
        best["start_s"] = min(starts) if starts else None
        best["starts_s"] = starts
        for k in ("peak_rss_mb", "peak_sum_mb", "peak_pss_mb"):
            best[k] = max(r[k] for r in seen)
        out[m] = best
    return out


# --------------------------------------------------------------------------- report


def cpu_ticks() -> tuple[int, int]:
    """(all, steal) CPU ticks of the machine so far, from /proc/stat: the share of time a
    virtual machine's host gave its CPUs to others, which makes timings noisy."""
    try:
        with open("/proc/stat") as fh:
            fields = [int(x) for x in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    return sum(fields[:8]), fields[7] if len(fields) > 7 else 0


def machine() -> str:
    cpu = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    import msgspec
    import polars

    try:
        import isal

        isal_v = isal.__version__
    except ImportError:
        isal_v = "not installed"
    return (f"{cpu}, {os.cpu_count()} cores, {mem:.0f} GiB RAM, Python {platform.python_version()}, "
            f"polars {polars.__version__}, msgspec {msgspec.__version__}, isal {isal_v}")


def row(label: str, method: str, r: dict | None, mb: float, largest_mb: float) -> str:
    if r is None:
        return f"| {label} | {method} | (not run) | | | | | | |"
    if "failed" in r:
        return f"| {label} | {method} | failed: {r['failed']} | | | | | | |"

    def f(x: float, digits: int) -> str:
        return "-" if x != x else f"{x:.{digits}f}"  # NaN: not watched

    return (f"| {label} | {method} | {r['wall_s']:.2f} | {mb / r['wall_s']:.0f} | {f(r['cpu_s'], 2)} | "
            f"{f(r['peak_rss_mb'], 0)} | {f(r['peak_sum_mb'], 0)} | {f(r['peak_pss_mb'], 0)} | "
            f"{f(r['peak_pss_mb'] / largest_mb, 1)} |")


HEADER = ("| set | method | wall s | MB/s | CPU s | peak RSS MB (largest process) | peak RSS sum MB (tree) "
          "| peak PSS sum MB (tree) | PSS sum / largest rank JSON |\n|---|---|---:|---:|---:|---:|---:|---:|---:|")


def communicate_watched(proc, watch, stop, t0: float) -> tuple[bytes, bytes, float]:
    """Run ``watch`` in a thread until ``proc`` ends; return its stdout, stderr and the wall
    time since ``t0``. ``watch`` polls until ``stop`` is set."""
    th = threading.Thread(target=watch, daemon=True)
    th.start()
    out, err = proc.communicate()
    wall = time.perf_counter() - t0
    stop.set()
    th.join()
    return out, err, wall


def start_log():
    """(lines, say, CPU ticks now): ``say(text)`` prints a line and keeps it in ``lines``; the
    machine and its load are said first."""
    lines: list[str] = []

    def say(text: str = "") -> None:
        print(text, flush=True)
        lines.append(text)

    ticks0 = cpu_ticks()
    say(f"machine: {machine()}")
    say(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    say()
    return lines, say, ticks0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--repeat", type=int, default=2, help="runs per measurement; the fastest is kept")
    ap.add_argument("--hta-python", default=os.environ.get("HTA_PYTHON"),
                    help="python of an environment with HolisticTraceAnalysis installed")
    ap.add_argument("--quick", action="store_true",
                    help="only the main comparison (floor, analyze, HTA) of each set in --sets")
    ap.add_argument("--sets", default=",".join(SIDE_BY_SIDE),
                    help="the sets compared side by side (default: the record_shapes set and the dense "
                         "ones, gzip and plain JSON)")
    ap.add_argument("--methods", default=None,
                    help="comma-separated methods of each set's comparison (default: all; with --quick: "
                         + ", ".join(QUICK_METHODS) + ")")
    ap.add_argument("--jobs-only", action="store_true", help="only the --jobs scaling table")
    ap.add_argument("--baseline", default=None,
                    help="a pipeaudit source tree (e.g. from git archive) to time as 'baseline'")
    ap.add_argument("--out", type=Path, default=None, help="also write the tables here (markdown)")
    args = ap.parse_args()
    global BASELINE
    BASELINE = args.baseline

    lines, say, ticks0 = start_log()
    if args.jobs_only:
        jobs_scaling(args.data, args.repeat, say)
        _finish(args.out, lines, say, ticks0)
        return
    sets = [name.strip() for name in args.sets.split(",") if name.strip()]
    missing = [name for name in sets if not (args.data / name).is_dir()]
    if missing:
        sys.exit(f"{', '.join(missing)} missing: run python benchmarks/make_traces.py {' '.join(missing)} first")
    summary = []
    for name in sets:
        summary.append(compare(name, args.data / name, args.repeat, args.hta_python, say, args.quick,
                               args.methods.split(",") if args.methods else None))
    shapes_table(summary, say)
    if args.quick:
        _finish(args.out, lines, say, ticks0)
        return
    for title, sets in (("Growth with trace size (4 ranks)", ["size_x1", "size_x2", "size_x4"]),
                        ("Growth with the number of ranks (about 50 MB JSON per rank)",
                         ["ranks_2", "size_x2", "ranks_8"])):
        say(f"## {title}")
        say()
        say(HEADER)
        for name in sets:
            d = args.data / name
            if not d.is_dir():
                say(f"| {name} | (missing: make_traces.py {name}) | | | | | | |")
                continue
            total, largest, ranks = json_bytes(d)
            label = f"{name} ({ranks}x{largest / 1e6:.0f} MB)"
            res = best_of_many(["floor", "analyze", "analyze-j1", "analyze-j2"], d, args.repeat, None)
            for m, r in res.items():
                say(row(label, m, r, total / 1e6, largest / 1e6))
        say()
    jobs_scaling(args.data, args.repeat, say)
    _finish(args.out, lines, say, ticks0)


#: the sets of the side-by-side table: each shape as the harness writes it (gzip) and as torch
#: writes it by default (plain JSON, ``<set>_json``: make_traces.py makes it)
SIDE_BY_SIDE = ["size_x4", "size_x4_json", "dense_x4", "dense_x4_json", "dense_plain", "dense_plain_json"]
#: every method of the full comparison; --quick keeps the floor, analyze and HTA's load
METHODS = ["floor", "floor-zlib", "decode-scan", "baseline", "analyze-msgspec", "analyze", "analyze-j1",
           "analyze-j2", "hta-load", "hta-breakdown"]
QUICK_METHODS = ["floor", "decode-scan", "baseline", "analyze", "hta-load"]


def compare(name: str, d: Path, repeat: int, hta_python: str | None, say, quick: bool,
            methods: list[str] | None = None) -> dict:
    """One set's comparison table (``methods``: these only); returns the figures the shapes
    table reads."""
    total, largest, ranks = json_bytes(d)
    say(f"## {name} ({ranks} ranks, {total / 1e6:.0f} MB JSON, largest rank {largest / 1e6:.0f} MB)")
    say()
    say(HEADER)
    methods = methods or (QUICK_METHODS if quick else METHODS)
    results = best_of_many(methods, d, repeat, hta_python)
    for m in methods:
        say(row(name, m, results[m], total / 1e6, largest / 1e6))
    say()
    walls = [f"{m} {', '.join(f'{w:.2f}' for w in r['walls_s'])}" for m in ("floor", "analyze")
             if (r := results.get(m)) and "failed" not in r and r.get("walls_s")]
    if walls:
        say("wall times, unwatched (s): " + "; ".join(walls))
    a = results.get("analyze")
    if a and "failed" not in a:
        if a.get("starts_s"):
            say("analyze start phase (process start to the first byte read): "
                + ", ".join(f"{s:.2f}" for s in a["starts_s"]) + f" s; best {a['start_s']:.2f} s")
        j1, j2 = results.get("analyze-j1"), results.get("analyze-j2")
        if j1 and j2 and "failed" not in j1 and "failed" not in j2:
            phase = (f" (ranks phase alone: {j1['ranks_s'] / j2['ranks_s']:.2f}x)"
                     if j1.get("ranks_s") and j2.get("ranks_s") else "")
            say(f"jobs=1 / jobs=2 wall: {j1['wall_s'] / j2['wall_s']:.2f}x{phase}")
        say()
    return {"set": name, "mb": total / 1e6, "largest_mb": largest / 1e6, "events": _events(results),
            **{m: results.get(m) for m in ("floor", "analyze", "hta-load")}}


def _events(results: dict) -> int | None:
    """Events in the set (the floor prints how many it decoded)."""
    f = results.get("floor")
    try:
        return int(f["stdout"].split()[-1]) if f and "failed" not in f else None
    except (ValueError, IndexError):
        return None


def _ok(r: dict | None) -> bool:
    return r is not None and "failed" not in r


def shapes_table(summary: list[dict], say) -> None:
    """The sets side by side: analyze against the floor and HTA, memory against its limit.
    Ratios of the fastest runs and of the medians; "targets" says whether analyze is at or
    under the floor (medians), at least 15x faster than HTA's load and within the memory limit."""
    say("## The shapes side by side")
    say()
    say("| set | format | JSON MB | events per MB | floor s (best / median) | analyze s (best / median) | "
        "analyze / floor (best / median) | HTA load s | HTA / analyze (median) | largest process MB | "
        "limit MB (200 + 3x largest file) | targets |")
    say("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for s in summary:
        f, a, h = s["floor"], s["analyze"], s["hta-load"]
        limit = 200 + 3 * s["largest_mb"]
        ratio = a["median_s"] / f["median_s"] if _ok(a) and _ok(f) else None
        hta = h["wall_s"] / a["median_s"] if _ok(a) and _ok(h) else None
        met = [ratio is not None and ratio <= 1.0, hta is not None and hta >= 15,
               _ok(a) and a["peak_rss_mb"] <= limit]
        cells = [s["set"], "plain JSON" if s["set"].endswith("_json") else "gzip", f"{s['mb']:.0f}",
                 f"{s['events'] / s['mb']:.0f}" if s["events"] else "",
                 f"{f['wall_s']:.2f} / {f['median_s']:.2f}" if _ok(f) else "",
                 f"{a['wall_s']:.2f} / {a['median_s']:.2f}" if _ok(a) else "",
                 f"{a['wall_s'] / f['wall_s']:.2f}x / {ratio:.2f}x" if ratio is not None else "",
                 f"{h['wall_s']:.2f}" if _ok(h) else "(not run)",
                 f"{hta:.1f}x" if hta is not None else "",
                 f"{a['peak_rss_mb']:.0f}" if _ok(a) else "", f"{limit:.0f}",
                 "met" if all(met) else "NOT met: " + ", ".join(
                     w for w, ok in zip(("floor", "HTA", "memory"), met) if not ok)]
        say("| " + " | ".join(cells) + " |")
    say()


JOBS_SETS = ["size_x4", "ranks_8", "large_r8"]


def jobs_scaling(data: Path, repeat: int, say) -> None:
    """``--jobs 1`` against ``--jobs 2``: end to end, and the ranks phase alone (the part
    the jobs run in parallel; the rest is the same work whatever the jobs)."""
    say("## Scaling with --jobs (2 cores)")
    say()
    say("| set | jobs 1 wall s | jobs 2 wall s | wall ratio | jobs 1 ranks phase s | "
        "jobs 2 ranks phase s | ranks phase ratio | rest (jobs 1 / jobs 2) s |")
    say("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name in JOBS_SETS:
        d = data / name
        if not d.is_dir():
            say(f"| {name} | (missing: make_traces.py {name}) | | | | | | |")
            continue
        _, largest, ranks = json_bytes(d)
        res = best_of_many(["analyze-j1", "analyze-j2"], d, repeat, None)
        j1, j2 = res["analyze-j1"], res["analyze-j2"]
        if any(r is None or "failed" in r or r["ranks_s"] is None for r in (j1, j2)):
            say(f"| {name} | failed | | | | | | |")
            continue
        say(f"| {name} ({ranks}x{largest / 1e6:.0f} MB) | {j1['wall_s']:.2f} | {j2['wall_s']:.2f} | "
            f"{j1['wall_s'] / j2['wall_s']:.2f}x | {j1['ranks_s']:.2f} | {j2['ranks_s']:.2f} | "
            f"{j1['ranks_s'] / j2['ranks_s']:.2f}x | {j1['wall_s'] - j1['ranks_s']:.2f} / "
            f"{j2['wall_s'] - j2['ranks_s']:.2f} |")
    say()


def _finish(out: Path | None, lines: list[str], say, ticks0: tuple[int, int]) -> None:
    total, steal = (a - b for a, b in zip(cpu_ticks(), ticks0))
    say(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; CPU time "
        f"stolen by the VM's host during the run: {100 * steal / max(total, 1):.1f}%")
    _write(out, lines)


def _write(out: Path | None, lines: list[str]) -> None:
    if out is not None:
        out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
