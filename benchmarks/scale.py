"""Scale benchmark: ``pipeaudit analyze`` on jobs of 64, 256 and 1,024 ranks, per phase.

    python benchmarks/scale.py                          # job_p8_r8 / r32 / r128, jobs 1, 2, dask
    python benchmarks/scale.py job_p64_r1 job_p64_r4    # other sets (benchmarks/make_job.py --list)
    python benchmarks/scale.py --modes j2 --gz job_p8_r32   # gz against plain JSON on one set
    python benchmarks/scale.py --start                  # the start phase and -X importtime only
    python benchmarks/scale.py --audit-share            # issue 34: the audit's share of a 64-rank run

The job sets are made by ``benchmarks/make_job.py`` (real harness rank files, relabelled
into D replicas x P stages with DeviceMesh ``pg_config``; made here when missing, into the
git-ignored ``benchmarks/data/``). Every measurement is one fresh ``pipeaudit analyze SET
--format json`` with ``PIPEAUDIT_TIMINGS=1``, watched from outside (``/proc``, every 50 ms)
as :mod:`benchmarks.run` does:

* the phases from analyze's timings line: start, ranks (decode + reduction of every rank,
  the part the jobs or the Dask workers run), audit, report, total;
* wall time and CPU time of every process that works for the run (analyze, its pool
  workers; in Dask mode also the cluster's worker processes, counted from the run's start);
* the CPU time of the analyze process after the ranks phase (audit + report): on a machine
  shared with other work it is steadier than their wall time;
* peak RSS of the largest single process, split into the analyze process itself ("parent";
  its peak up to the end of the ranks phase, when it holds every rank's result, and after
  it) and the largest worker (pool worker or Dask worker), against the target
  200 MB + 3 x the largest rank's JSON;
* "others' cores": the machine's busy CPU time during the run that was not this run's,
  per second of wall time (other users' work on a shared machine);
* the number of actions audited (the sum of the report's per-stage action counts) and the
  audit phase per action, whose ratio between sets says whether the audit grows linearly;
* after the table, the audit's share of the run (audit / total, the cross-rank part that runs
  once in the parent after every rank is reduced) of every run, not only the best.

``--audit-share`` is ``job_p64_r1_m128 --modes j2 --repeat 3``: issue 34's figure, the audit of
a 64-rank job (64 stages, M = 128, 5 steps; ``make_job.py --list``) at most 10 % of the run
(``--jobs 2`` is analyze's default on this 2-core machine).

Modes: ``j1`` (``--jobs 1``), ``j2`` (``--jobs 2``), ``dask`` (``--executor dask://`` on a
``LocalCluster`` of 2 worker processes, 1 thread each, started by this script; the workers
are restarted before each run so that every run starts from fresh workers, as the local
pool does). The CPU time the VM's host stole from this machine during each run is printed
with it: above a few percent, or with others' cores above a few tenths, wall times are noisy.
``--out FILE`` writes the tables (markdown) and, next to them, the raw figures (``.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run import TICK, _sample, _tree, communicate_watched, cpu_ticks, start_log  # noqa: E402  (benchmarks/run.py)

ROOT = HERE.parent
DATA = HERE / "data"
SETS = ["job_p8_r8", "job_p8_r32", "job_p8_r128"]
#: ``--audit-share``: the set, mode and runs of issue 34's audit share
AUDIT_SHARE = (["job_p64_r1_m128"], "j2", 3)
MODES = ["j1", "j2", "dask"]
_TIMINGS = re.compile(r"pipeaudit timings: (.*)")
_PHASE = re.compile(r"(start|ranks|audit|report|total) ([0-9.]+) s")


def env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
                PIPEAUDIT_TIMINGS="1")


def ensure_set(name: str, plain: bool = False) -> Path:
    """The job set ``name`` (made by make_job.py when missing)."""
    d = DATA / (name + ("_json" if plain else ""))
    if not (d / "job.json").exists():
        cmd = [sys.executable, str(HERE / "make_job.py"), name] + (["--json"] if plain else [])
        subprocess.run(cmd, check=True, env=env(), cwd=ROOT)
    return d


def largest_rank_json(d: Path) -> int:
    """The largest rank's JSON bytes (gzip: the size its trailer records)."""
    best = 0
    for f in d.glob("rank*_trace.json*"):
        n = f.stat().st_size
        if f.name.endswith(".gz"):
            with open(f, "rb") as fh:
                fh.seek(-4, os.SEEK_END)
                n = int.from_bytes(fh.read(4), "little")  # mod 2**32: fine below 4 GB
        best = max(best, n)
    return best


def busy_ticks() -> tuple[int, int]:
    """(all, busy) CPU ticks of the machine so far (busy: neither idle nor waiting on I/O)."""
    with open("/proc/stat") as fh:
        f = [int(x) for x in fh.readline().split()[1:]]
    return sum(f[:8]), sum(f[:8]) - f[3] - f[4]


def measure(cmd: list[str], extra_pids: list[int]) -> dict:
    """Run ``cmd``; watch it, its descendants and ``extra_pids`` (Dask workers)."""
    ticks0 = cpu_ticks()
    busy0 = busy_ticks()
    cpu0 = {p: s[1] for p in extra_pids if (s := _sample(p)) is not None}
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env(), cwd=ROOT)
    cpu: dict[int, float] = {}
    peak: dict[int, int] = {}
    parent: list[tuple[float, int, float]] = []  # (seconds since the start, RSS, CPU s) of analyze
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            for pid in _tree(proc.pid) + extra_pids:
                s = _sample(pid)
                if s is not None:
                    peak[pid] = max(peak.get(pid, 0), s[0])
                    if pid == proc.pid:
                        parent.append((time.perf_counter() - t0, s[0], s[1]))
                    cpu[pid] = max(cpu.get(pid, 0.0), s[1] - cpu0.get(pid, 0.0))
            stop.wait(0.05)

    out, err, wall = communicate_watched(proc, watch, stop, t0)
    total, steal = (a - b for a, b in zip(cpu_ticks(), ticks0))
    all_t, busy = (a - b for a, b in zip(busy_ticks(), busy0))
    text = err.decode(errors="replace")
    m = _TIMINGS.search(text)
    phases = {k: float(v) for k, v in _PHASE.findall(m.group(1))} if m else {}
    # the parent's peak up to the end of the ranks phase (it then holds every rank's result)
    # and after it (the audit and the report)
    ranks_end = phases.get("start", 0.0) + phases.get("ranks", 0.0)
    before = max((r for t, r, _ in parent if t <= ranks_end), default=0)
    after = max((r for t, r, _ in parent if t > ranks_end), default=0)
    # the parent's CPU time after the ranks phase (audit + report): steadier than their wall
    # time on a loaded machine
    cpu_at_end = max((c for _, _, c in parent), default=0.0)
    cpu_at_ranks = max((c for t, _, c in parent if t <= ranks_end), default=0.0)
    actions = None
    if proc.returncode == 0:
        report = json.loads(out)
        actions = sum(sum(s["actions"].values()) for s in report["stages"])
    workers = [p for p in peak if p != proc.pid]
    ours = sum(cpu.values())
    return {"rc": proc.returncode, "wall_s": wall, "cpu_s": ours, "phases": phases,
            "others": max(0.0, busy / TICK - ours) / wall,  # cores busy with other work
            "parent_ranks_mb": before / 1e6, "parent_audit_mb": after / 1e6,
            "after_ranks_cpu_s": cpu_at_end - cpu_at_ranks,
            "actions": actions, "parent_mb": peak.get(proc.pid, 0) / 1e6,
            "worker_mb": max((peak[p] for p in workers), default=0) / 1e6,
            "steal": 100 * steal / max(total, 1), "stderr": text.strip().splitlines()[-3:]}


class DaskCluster:
    """A LocalCluster of 2 worker processes (1 thread each) and its client."""

    def __init__(self) -> None:
        import logging

        from dask.distributed import Client, LocalCluster

        self.cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                    dashboard_address=None, silence_logs=logging.ERROR)
        self.client = Client(self.cluster)

    @property
    def address(self) -> str:
        return "dask://" + self.cluster.scheduler_address.split("://", 1)[1]

    def fresh_pids(self) -> list[int]:
        """Restart the workers; their process ids (and their nannies')."""
        self.client.restart()
        workers = list(self.client.run(os.getpid).values())
        return workers + [p for p in _tree(os.getpid()) if p != os.getpid() and p not in workers]

    def close(self) -> None:
        self.client.close()
        self.cluster.close()


def command(d: Path, mode: str, cluster: DaskCluster | None) -> list[str]:
    cmd = [sys.executable, "-m", "pipeaudit", "analyze", str(d), "--format", "json"]
    if mode == "j1":
        return cmd + ["--jobs", "1"]
    if mode == "j2":
        return cmd + ["--jobs", "2"]
    assert cluster is not None
    return cmd + ["--executor", cluster.address]


def fmt(x: float | None, spec: str = ".2f") -> str:
    return "-" if x is None else format(x, spec)


ROW_HEAD = ("| set (ranks, largest rank JSON) | mode | start s | ranks s | audit s | report s | total s "
            "| CPU s | audit + report CPU s | actions | audit µs/action | parent peak MB (ranks / audit) | largest worker MB | target MB "
            "| others' cores | steal % |\n"
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")


def row(label: str, mode: str, r: dict, target: float) -> str:
    if r["rc"] != 0:
        return f"| {label} | {mode} | failed (exit {r['rc']}): {' / '.join(r['stderr'])[:200]} |"
    p = r["phases"]
    per = 1e6 * p["audit"] / r["actions"] if r["actions"] and "audit" in p else None
    return (f"| {label} | {mode} | {fmt(p.get('start'))} | {fmt(p.get('ranks'))} | {fmt(p.get('audit'))} "
            f"| {fmt(p.get('report'))} | {fmt(p.get('total'))} | {r['cpu_s']:.1f} | {r['after_ranks_cpu_s']:.2f} "
            f"| {r['actions']:,} "
            f"| {fmt(per, '.1f')} | {r['parent_mb']:.0f} ({r['parent_ranks_mb']:.0f} / "
            f"{r['parent_audit_mb']:.0f}) | {r['worker_mb']:.0f} | {target:.0f} | {r['others']:.1f} "
            f"| {r['steal']:.0f} |")


def share_line(key: str, mode: str, runs: list[dict]) -> str:
    """Every run's audit / total, with the phases it comes from."""
    ok = [r["phases"] for r in runs if r["rc"] == 0 and "audit" in r["phases"] and r["phases"].get("total")]
    if not ok:
        return f"- {key} {mode}: no run gave its phases"
    pct = ", ".join(f"{100 * p['audit'] / p['total']:.1f} %" for p in ok)
    audit = ", ".join(f"{p['audit']:.2f}" for p in ok)
    total = ", ".join(f"{p['total']:.2f}" for p in ok)
    return f"- {key} {mode}: {pct} (audit {audit} s of total {total} s)"


def growth(results: dict[tuple[str, str], dict], sets: list[str], modes: list[str], ranks: dict[str, int],
           say) -> None:
    """Ratios from each set to the next and from the first to the last: ranks, actions,
    phases, audit per action, and the marginal audit time per added action (the audit phase
    holds a fixed part too: the audit's own imports, the layout, the report's dictionary)."""
    say("| mode | from -> to ranks | ranks x | actions x | ranks phase x | audit x | audit per action x "
        "| marginal audit µs/action | audit + report CPU x | total x | parent peak x |")
    say("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    pairs = list(zip(sets, sets[1:])) + ([(sets[0], sets[-1])] if len(sets) > 2 else [])
    for mode in modes:
        for first, name in pairs:
            base, r = results.get((first, mode)), results.get((name, mode))
            if base is None or r is None or base["rc"] != 0 or r["rc"] != 0:
                continue
            b, p = base["phases"], r["phases"]
            ax = r["actions"] / base["actions"]
            marginal = 1e6 * (p["audit"] - b["audit"]) / (r["actions"] - base["actions"])
            say(f"| {mode} | {ranks[first]} -> {ranks[name]} | {ranks[name] / ranks[first]:.0f} | {ax:.1f} "
                f"| {p['ranks'] / b['ranks']:.1f} | {p['audit'] / b['audit']:.1f} "
                f"| {p['audit'] / b['audit'] / ax:.2f} | {marginal:.0f} "
                f"| {r['after_ranks_cpu_s'] / max(base['after_ranks_cpu_s'], 1e-3):.1f} | {p['total'] / b['total']:.1f} "
                f"| {r['parent_mb'] / base['parent_mb']:.2f} |")


def start_phase(repeat: int, say) -> None:
    """Best of ``repeat`` start phases (process start to the first rank's decode) on a small
    sample, and the largest imports of one ``-X importtime`` run."""
    sample = ROOT / "sample_traces" / "1f1b_p4_m8"
    starts = []
    for _ in range(repeat):
        ticks0 = cpu_ticks()
        p = subprocess.run([sys.executable, "-m", "pipeaudit", "analyze", str(sample), "--format", "json"],
                           capture_output=True, text=True, env=env(), cwd=ROOT)
        total, steal = (a - b for a, b in zip(cpu_ticks(), ticks0))
        m = _TIMINGS.search(p.stderr)
        if m:
            starts.append((dict(_PHASE.findall(m.group(1)))["start"], 100 * steal / max(total, 1)))
    say(f"start phase on {sample.name}, {repeat} runs: "
        + ", ".join(f"{s} s (steal {st:.0f}%)" for s, st in starts)
        + f"; best {min(float(s) for s, _ in starts):.2f} s")
    p = subprocess.run([sys.executable, "-X", "importtime", "-m", "pipeaudit", "analyze", str(sample),
                        "--format", "json"], capture_output=True, text=True, env=env(), cwd=ROOT)
    rows = []
    for line in p.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            self_us, cum_us, name = (x.strip() for x in line[12:].split("|"))
            if self_us.isdigit():
                rows.append((int(cum_us), name.strip()))
    top = [r for r in rows if not r[1].startswith(" ")]  # top-level imports only
    say("largest top-level imports (cumulative ms): "
        + ", ".join(f"{n} {c / 1000:.0f}" for c, n in sorted(top, reverse=True)[:10]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sets", nargs="*", default=SETS, help=f"job sets (default: {' '.join(SETS)})")
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated: j1, j2, dask")
    ap.add_argument("--gz", metavar="SET", help="only: this set as .json.gz against plain .json (modes)")
    ap.add_argument("--start", action="store_true", help="only: the start phase and imports")
    ap.add_argument("--audit-share", action="store_true",
                    help=f"{' '.join(AUDIT_SHARE[0])} --modes {AUDIT_SHARE[1]} --repeat "
                         f"{AUDIT_SHARE[2]}: the audit's share of a 64-rank run (issue 34)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per measurement (best wall kept)")
    ap.add_argument("--out", type=Path, help="also write the tables here (markdown)")
    args = ap.parse_args()
    if args.audit_share:
        args.sets, args.modes, args.repeat = AUDIT_SHARE
    modes = [m for m in args.modes.split(",") if m]
    lines, say, ticks0 = start_log()
    results: dict[tuple[str, str], dict] = {}
    if args.start:
        start_phase(max(args.repeat, 5), say)
    else:
        pairs = ([(args.gz, False), (args.gz, True)] if args.gz else [(s, False) for s in args.sets])
        cluster = DaskCluster() if "dask" in modes else None
        ranks: dict[str, int] = {}
        shares: list[str] = []
        try:
            say(ROW_HEAD)
            for name, plain in pairs:
                d = ensure_set(name, plain)
                facts = json.loads((d / "job.json").read_text())
                largest = largest_rank_json(d)
                key = d.name
                ranks[key] = facts["ranks"]
                label = f"{key} ({facts['ranks']}, {largest / 1e6:.1f} MB)"
                for mode in modes:
                    runs = []
                    for _ in range(args.repeat):
                        extra = cluster.fresh_pids() if mode == "dask" and cluster else []
                        runs.append(measure(command(d, mode, cluster), extra))
                    ok = [r for r in runs if r["rc"] == 0]
                    r = min(ok, key=lambda r: r["wall_s"]) if ok else runs[-1]
                    results[(key, mode)] = r
                    say(row(label, mode, r, 200 + 3 * largest / 1e6))
                    shares.append(share_line(key, mode, runs))
            say()
            say("audit share of the run (audit / total; target: at most 10 %):")
            for line in shares:
                say(line)
            say()
            keys = [n + ("_json" if p else "") for n, p in pairs]
            if len(keys) > 1 and not args.gz:
                growth(results, keys, modes, ranks, say)
                say()
        finally:
            if cluster is not None:
                cluster.close()
    total, steal = (a - b for a, b in zip(cpu_ticks(), ticks0))
    say(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; CPU time stolen by "
        f"the VM's host during the benchmark: {100 * steal / max(total, 1):.1f}%")
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")
        if not args.start:  # the raw figures too, for later tables
            raw = [dict(r, set=k[0], mode=k[1]) for k, r in results.items()]
            args.out.with_suffix(".json").write_text(json.dumps(raw, indent=1))


if __name__ == "__main__":
    main()
