"""Long search over generated pipeline traces with known truth (issue 50).

    python3 benchmarks/generated_reading.py --cases 100000 --jobs 16 --seed 0

Each case draws every dimension independently (tests/support/tracegen/strategies.py), writes
its traces, reads them with pipeaudit.load and holds the reading to the truth
(tests/support/tracegen/check.py). Prints pass / cannot-tell / fail counts by shape, the worst
bubble error of a right reading, the share read right of the cases read from the ops by each
dimension's value, the reasons it cannot tell, and for each kind of failure the smallest case
that shows it (with the command that writes its traces). Exit 1 on any failure. Needs only the
repository and its installed dependencies (torch for the schedules' orders).

A long search can be cut into shards (``--start``, ``--cases``: the same cases whatever the
jobs or machines) and stopped at any time: ``--seconds``, Ctrl-C or SIGTERM report the cases
done, and ``--report FILE`` keeps the report current every minute while it runs. With
``--ledger FILE`` (benchmarks/search_ledger.py) it resumes where it stopped, on any machine with
the same code, and reports every case the ledger holds.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import re
import signal
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
# one job a core: polars' own thread pool in each job only contends with the others (10 %
# slower a case, measured with one job on two cores)
os.environ.setdefault("POLARS_MAX_THREADS", "1")

from search_ledger import Ledger, LedgerMismatch, code_hash  # noqa: E402  (beside this script)


def _problem_kind(p: str) -> str:
    """A failure's kind without its numbers: 'M read as', 'rank: bubble', 'MISSING_ACTIONS'..."""
    p = re.sub(r"\(rank \d+\)", "", p)
    p = re.sub(r"^rank \d+: ", "rank: ", p)
    return re.split(r" read as| \d|:| off| \(", p, maxsplit=1)[0].strip() + (
        " read as" if " read as" in p else "")


def _reason_kind(reason: str) -> str:
    """Why a reading cannot tell, without its ranks and numbers: the first rank's reason, up
    to its first bracket or colon ('stage N step N reads N forwards but N backwards')."""
    text = re.sub(r"^.*?settle what ran: ", "", reason)
    text = re.sub(r"^rank \d+: ", "", text)
    text = re.split(r" \(|: |; ", text, maxsplit=1)[0]
    return re.sub(r"\b\d+(\.\d+)?\b", "N", text)[:90]


def _size(c) -> int:
    return c.pp * c.v * c.m * c.steps * c.dp * c.tp


#: The generator's schedules that split the backward into I and W: read from the ops, the
#: reading most often cannot tell, so the report shows their dimensions on their own.
SPLIT_BACKWARD = ("interleaved-zb", "zbv", "dualpipev")


def _dimensions(c) -> dict[str, str]:
    """The dimensions of a case a reading from the ops may depend on, each as a short value."""
    heavy = "none"
    if c.heavy_factor > 1 and (c.heavy_stage is not None or c.heavy_chunk is not None):
        heavy = ("stage" if c.heavy_stage is not None else "chunk") + (
            " by layers" if c.heavy_by_layers else " by ops")
    return {
        "P": str(c.pp) if c.pp < 5 else "5-8", "v": str(c.v), "M / P": "<1" if c.m < c.pp else
        f"{min(c.m // c.pp, 3)}{'+' if c.m // c.pp >= 3 else ''}", "steps": str(min(c.steps, 2)) + (
            "+" if c.steps >= 2 else ""), "grid": c.grid, "DP": str(c.dp), "TP": str(c.tp),
        "P2P": c.p2p + (" batched" if c.batched else ""), "named groups": str(c.named_groups),
        "step marks": str(c.profiler_steps), "batch split": str(c.batch_split),
        "optimizer": str(c.optimizer), "op shape": c.op_shape, "layers": str(c.layers),
        "nested ops": str(c.nested), "loss op": str(c.loss), "data load": str(c.data_load),
        "heavy": heavy, "descheduled op": str(c.deschedule), "engine glue": str(c.engine_glue),
        "one rank's file": str(c.one_rank is not None), "shuffled": str(c.shuffle),
        "steps stated": str(c.state_steps), "M stated": str(c.state_microbatches),
        "latency µs": f"{c.latency_us:g}",
    }


def _dimension_lines(counts: dict[str, dict[str, Counter]], width: int = 118) -> list[str]:
    """One line a dimension (wrapped at ``width``): each value's cases read right of its cases."""
    lines = []
    for dim, by_value in counts.items():
        cells = [f"{value} {c['pass']}/{sum(c.values())} ({c['pass'] / sum(c.values()):.0%})"
                 for value, c in sorted(by_value.items())]
        line, first = f"    {dim:16}", True
        for cell in cells:
            if not first and len(line) + 2 + len(cell) > width:
                lines.append(line)
                line, first = " " * 20, True
            line += ("" if first else "  ") + cell
            first = False
        lines.append(line)
    return lines


def _default_sigterm() -> None:
    """Each worker stops at SIGTERM, as the pool's terminate() expects: one the pool starts in
    place of a killed one is forked after the search set its own handler, and would inherit it
    (the pool then waits for it forever)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _case(i: int, seed: int, opts: dict):
    """Case number ``i`` of the search of ``seed``: the same case on any machine."""
    from tests.support.tracegen.strategies import random_case

    return random_case(random.Random(f"{seed}:{i}"), **opts)


def _work(args):
    numbers, seed, opts, limit = args
    from tests.support.tracegen.check import run_case

    out = []
    for i in numbers:
        case = _case(i, seed, opts)
        t0 = time.perf_counter()
        try:
            o = run_case(case, limit_s=limit)
            res = (o.verdict, o.problems, o.worst_bubble_error, o.uncertain_reason,
                   o.lowest_coverage)
        except Exception as e:  # a crash of the reader (or the generator) is a failure
            res = ("fail", [f"crash: {type(e).__name__}: {str(e)[:160]}"], 0.0, "", None)
        verdict, problems, err, reason, coverage = res
        out.append({"i": i, "shape": case.shape(), "size": _size(case), "verdict": verdict,
                    "err": round(err, 6), "ms": round(1000 * (time.perf_counter() - t0), 1),
                    **({"cov": round(coverage, 6)} if coverage is not None else {}),
                    **({"problems": problems} if verdict == "fail" else {}),
                    **({"reason": reason[:300]} if verdict == "cannot tell" else {})})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=2000)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--start", type=int, default=0,
                    help="first case number (shards of one search: --start 50000 --cases 50000)")
    ap.add_argument("--report", default="", help="also write the report here, every minute "
                    "while the search runs (a stopped run keeps what it did)")
    ap.add_argument("--budget", type=int, default=256, help="max ranks x v x M x steps per case")
    ap.add_argument("--schedules", default="", help="comma-separated subset (default: all)")
    ap.add_argument("--annotated", choices=("both", "yes", "no"), default="both")
    ap.add_argument("--p2p", default="gloo,nccl", help="comma-separated P2P kinds (gloo, nccl)")
    ap.add_argument("--step-marks", choices=("both", "yes", "no"), default="both",
                    help="cases with ProfilerStep marks, without, or either")
    ap.add_argument("--no-one-rank", action="store_true", help="no case of one rank's file")
    ap.add_argument("--chunk", type=int, default=20, help="cases per task")
    ap.add_argument("--limit", type=int, default=60, help="seconds a reading may take (0: none)")
    ap.add_argument("--seconds", type=float, default=0,
                    help="stop after this wall time and report the cases done (0: none)")
    ap.add_argument("--ledger", default="", help="one JSON line a case done: a search stopped "
                    "resumes from it (the cases it holds are not run again) and reports them all")
    ap.add_argument("--summary", action="store_true",
                    help="report the cases the ledger holds in the range, and run none (a "
                    "ledger of other code too: the report names its code)")
    a = ap.parse_args(argv)
    if a.summary and not a.ledger:
        ap.error("--summary reads a ledger: give --ledger FILE")

    from tests.support.tracegen.orders import SCHEDULES

    opts = {"budget": a.budget, "p2p": tuple(a.p2p.split(",")), "one_rank_files": not a.no_one_rank,
            "step_marks": {"both": (False, True), "yes": (True,), "no": (False,)}[a.step_marks],
            "annotated": {"both": (False, True), "yes": (True,), "no": (False,)}[a.annotated]}
    if a.schedules:
        opts["schedules"] = tuple(s for s in a.schedules.split(",") if s in SCHEDULES)
    stop = a.start + a.cases
    code = code_hash(REPO)
    ledger = None
    if a.ledger:
        header = json.loads(json.dumps({"code": code, "seed": a.seed, "options": opts}))
        try:
            ledger = Ledger(a.ledger, header, ignore=("code",) if a.summary else ())
        except (LedgerMismatch, OSError) as e:
            print(f"pipeaudit search: {e}", file=sys.stderr)
            return 2
        if ledger.read_only and not a.summary:
            print(f"pipeaudit search: {a.ledger}: a compressed ledger is only read (--summary); "
                  "resume a copy: gunzip -k it and give --ledger the .jsonl", file=sys.stderr)
            return 2
    resumed = {i: r for i, r in ledger.done.items() if a.start <= i < stop} if ledger else {}
    todo = [] if a.summary else [i for i in range(a.start, stop) if i not in resumed]
    tasks = [(todo[k:k + a.chunk], a.seed, opts, a.limit) for k in range(0, len(todo), a.chunk)]
    if ledger is not None and ledger.header["code"] != code:  # a summary of another code's search
        code = f"{ledger.header['code']} (the ledger's; this code is {code})"
    tally = Tally(lambda i: _case(i, a.seed, opts), code)
    for rec in resumed.values():
        tally.add(rec)
    tally.resumed = len(resumed)
    t0 = time.perf_counter()
    last_report = t0
    stopped = []
    ctx = mp.get_context("fork" if sys.platform != "win32" else "spawn")
    with ctx.Pool(a.jobs, initializer=_default_sigterm) as pool:
        signal.signal(signal.SIGTERM, lambda *_: stopped.append("SIGTERM"))
        batches = pool.imap_unordered(_work, tasks)
        try:
            while True:
                try:
                    # a timeout, so that a stop is seen even while no task ends: a batch
                    # system's SIGTERM reaches every process of the job, and a worker killed
                    # mid-task never returns its batch
                    batch = batches.next(timeout=POLL_S)
                except StopIteration:
                    break
                except mp.TimeoutError:
                    batch = []
                for rec in batch:
                    tally.add(rec)
                    if ledger is not None:
                        ledger.append(rec)
                if batch and sys.stderr.isatty():
                    print(f"\r{tally.done}/{a.cases}", end="", file=sys.stderr)
                now = time.perf_counter()
                if a.report and now - last_report > REPORT_EVERY_S:
                    _write(a.report, tally.report(now - t0, a))
                    last_report = now
                if stopped or (a.seconds and now - t0 > a.seconds):
                    break  # the budget is spent (or the run was stopped): report what was done
        except KeyboardInterrupt:
            pass
        pool.terminate()
    if ledger is not None:
        ledger.close()
    text = tally.report(time.perf_counter() - t0, a)
    if a.report:
        _write(a.report, text)
    print(text)
    return 1 if tally.verdicts["fail"] else 0


#: Reasons for "cannot tell" the report lists (the most frequent).
REASONS_SHOWN = 12
#: A right reading's coverage this close to 100 % leaves no compute unexplained (rounding).
COVERED_SLACK = 1e-6
#: How often (seconds) ``--report`` is rewritten while the search runs.
REPORT_EVERY_S = 60
#: How often (seconds) the search looks for a stop while it waits for a batch.
POLL_S = 1.0


def _write(path: str, text: str) -> None:
    """Replace ``path`` with ``text`` at once (a reader never sees half a report)."""
    tmp = f"{path}.tmp"
    Path(tmp).write_text(text + "\n")
    os.replace(tmp, path)


class Tally:
    """The verdicts so far, by shape, the worst bubble error of a right reading and the
    smallest case of each kind of failure, from the cases' records (:func:`_work`; ``case_of``
    draws a case again from its number, for the report)."""

    def __init__(self, case_of, code: str = "") -> None:
        self.case_of = case_of
        self.code = code
        self.done = 0
        self.resumed = 0
        self.seconds = 0.0
        self.verdicts: Counter = Counter()
        self.by_shape: dict[str, Counter] = defaultdict(Counter)
        self.fail_groups: dict[tuple, list] = {}
        self.worst: tuple = (0.0, None)
        #: right readings from the ops: how many, how many left compute unexplained, the least
        #: covered (coverage, case)
        self.covered = [0, 0, (1.0, None)]
        self.reasons: Counter = Counter()
        #: read from the ops: family ("split backward" or not) -> dimension -> value -> verdicts
        self.by_dimension: dict[str, dict[str, dict[str, Counter]]] = {}

    def add(self, rec: dict) -> None:
        verdict = rec["verdict"]
        schedule, annotation, _ = rec["shape"].split("/")
        if annotation == "bare":
            family = ("split backward: " + ", ".join(SPLIT_BACKWARD) if schedule in SPLIT_BACKWARD
                      else "one backward per forward: the others")
            dims = self.by_dimension.setdefault(family, {})
            for dim, value in _dimensions(self.case_of(rec["i"])).items():
                dims.setdefault(dim, defaultdict(Counter))[value][verdict] += 1
        self.done += 1
        self.seconds += rec["ms"] / 1000
        self.verdicts[verdict] += 1
        self.by_shape[rec["shape"]][verdict] += 1
        if verdict == "cannot tell":
            self.reasons[_reason_kind(rec.get("reason", ""))] += 1
        if verdict == "pass" and rec["err"] > self.worst[0]:  # a failure's error is its problem's
            self.worst = (rec["err"], rec["i"])
        if verdict == "pass" and "cov" in rec:
            self.covered[0] += 1
            self.covered[1] += rec["cov"] < 1.0 - COVERED_SLACK
            if rec["cov"] < self.covered[2][0]:
                self.covered[2] = (rec["cov"], rec["i"])
        if verdict == "fail":
            for kind in sorted({_problem_kind(p) for p in rec["problems"]}):
                key = (*rec["shape"].split("/"), kind)
                g = self.fail_groups.setdefault(key, [0, None, None, None])
                g[0] += 1
                if g[1] is None or rec["size"] < g[3]:
                    g[1], g[2], g[3] = rec["i"], rec["problems"], rec["size"]

    def report(self, wall: float, a: argparse.Namespace) -> str:
        resumed = f", {self.resumed} of them from the ledger" if self.resumed else ""
        lines = [f"{self.done} cases (from case {a.start}{resumed}) in {wall:.1f} s wall, "
                 f"{1000 * self.seconds / max(1, self.done):.0f} ms a case (generate + write + read), "
                 f"{a.jobs} jobs, seed {a.seed}, code {self.code}",
                 "verdicts: " + ", ".join(f"{k} {v}" for k, v in sorted(self.verdicts.items()))]
        wc = self.case_of(self.worst[1]).describe() if self.worst[1] is not None else "-"
        lines.append(f"worst bubble error of a reading held to the truth and right: "
                     f"{self.worst[0]:.5f} ({wc})")
        if self.covered[0]:
            n, short, (low, i) = self.covered
            lines.append(f"compute conservation of the right readings from the ops: {short} of {n} "
                         f"leave compute unexplained; least covered {100 * low:.2f} %"
                         + (f" (case {i})" if i is not None else ""))
        lines.append("by shape (schedule/annotation/p2p): pass / cannot tell / fail")
        for shape in sorted(self.by_shape):
            c = self.by_shape[shape]
            lines.append(f"  {shape:40} {c['pass']:6} {c['cannot tell']:6} {c['fail']:6}")
        if self.by_dimension:
            lines.append("read from the ops, by dimension: cases read right / cases (the rest "
                         "cannot tell or fail)")
            for family in sorted(self.by_dimension):
                lines.append(f"  {family}")
                lines.extend(_dimension_lines(self.by_dimension[family]))
        if self.reasons:
            lines.append("cannot tell, by the first rank's reason:")
            lines.extend(f"  {n:6}  {why}" for why, n in self.reasons.most_common(REASONS_SHOWN))
            rest = sum(self.reasons.values()) - sum(n for _, n in self.reasons.most_common(REASONS_SHOWN))
            if rest:
                lines.append(f"  {rest:6}  (other reasons)")
        if self.fail_groups:
            lines.append("failures by kind, with the smallest case of each:")
            for key in sorted(self.fail_groups):
                n, i, problems, _ = self.fail_groups[key]
                case = self.case_of(i)
                lines.append(f"  {'/'.join(key)}: {n} cases; smallest: case {i}, {case.describe()}")
                lines.extend(f"      {p}" for p in problems[:4])
                lines.append(f"      python3 -m tests.support.tracegen \"{case!r}\" /tmp/tracegen-case")
        return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
