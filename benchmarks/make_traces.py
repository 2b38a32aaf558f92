"""Generate the benchmark trace sets with the real harness (not a test; slow, run once).

    python benchmarks/make_traces.py                 # every set into benchmarks/data/
    python benchmarks/make_traces.py size_x4 ranks_8 # only these sets
    python benchmarks/make_traces.py dense_x4_json   # a plain-JSON set (the gzip one gunzipped)
    python benchmarks/make_traces.py --list          # what each set is

Every set is a real ``pipeaudit profile`` run: 1F1B over gloo on CPU, M=16 microbatches,
two pipeline blocks per stage (hidden 64, sequence 16) and ``--record-shapes``, so that
each rank's trace holds every aten op of every microbatch with its input shapes. A rank's
JSON grows by about 1.9 MB per profiled step (measured: 4 steps -> 7.5-8.3 MB per rank);
the step count sets the size honestly: more real training steps, not padding.

Sets (``benchmarks/data/<name>/rank{r}.json.gz`` + ``manifest.json``):

* ``size_x1``, ``size_x2``, ``size_x4``: 4 ranks, 13 / 26 / 52 steps (about 25 / 50 /
  100 MB of JSON per rank): growth with trace size; ``size_x4`` is the main set (the
  CEO's "4 ranks x 100 MB").
* ``ranks_2``, ``ranks_8``: 2 and 8 ranks of 26 steps (about 50 MB per rank, as
  ``size_x2``, which is the 4-rank point): growth with the number of ranks.
* ``large_r8``: 8 ranks of 104 steps (about 200 MB per rank, 1.6 GB of JSON): how
  ``--jobs`` scales once the per-rank work outweighs the fixed cost of a run.

The dense sets are profiled as most users profile: no ``--record-shapes``, so a trace is
many small events (about 4,000 per MB against 2,600):

* ``dense_x4``: interleaved 1F1B (v = 2, two blocks per stage), 4 ranks, 37 steps (about
  100 MB per rank), with torch's own ``PP:`` action spans.
* ``dense_plain``: 1F1B without any annotation (``--no-annotate``), 4 ranks, 77 steps
  (about 100 MB per rank): the un-annotated inference's input.

Plain JSON, as torch writes by default (``export_chrome_trace("trace.json")``,
``tensorboard_trace_handler(..., use_gzip=False)``): ``<set>_json`` holds the same traces as
``<set>`` gunzipped (``rank{r}.json``), e.g. ``size_x4_json``, ``dense_x4_json``,
``dense_plain_json``; the gzip set is made first when missing.

A set that already exists (its manifest is there) is skipped; ``--force`` remakes it.
On this 2-core machine all sets take about 20-25 minutes (``large_r8`` about 10).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DATA = HERE / "data"

#: name -> (ranks P, profiled steps)
SETS: dict[str, tuple[int, int]] = {
    "size_x1": (4, 13),
    "size_x2": (4, 26),
    "size_x4": (4, 52),
    "ranks_2": (2, 26),
    "ranks_8": (8, 26),
    "large_r8": (8, 104),
    "dense_x4": (4, 37),
    "dense_plain": (4, 77),
}

#: the dense sets' schedule options (no --record-shapes)
DENSE: dict[str, list[str]] = {
    "dense_x4": ["--schedule", "interleaved-1f1b", "--chunks", "2"],
    "dense_plain": ["--schedule", "1f1b", "--no-annotate"],
}


#: the plain-JSON sets: the same traces as a gzip set, gunzipped
PLAIN_SUFFIX = "_json"


def plain_sets() -> list[str]:
    """The ``<set>_json`` names, one per gzip set."""
    return [name + PLAIN_SUFFIX for name in SETS]


def make_plain(name: str, out_root: Path, force: bool) -> None:
    """``<set>_json``: the gzip set's rank files gunzipped, its manifest naming them."""
    import gzip
    import json

    source = name.removesuffix(PLAIN_SUFFIX)
    make(source, out_root, False)
    src, out = out_root / source, out_root / name
    if (out / "manifest.json").exists() and not force:
        print(f"{name}: exists, skipped ({out})", file=sys.stderr)
        return
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for f in sorted(src.glob("rank*.json.gz")):
        with gzip.open(f, "rb") as fin, open(out / f.name.removesuffix(".gz"), "wb") as fout:
            shutil.copyfileobj(fin, fout, 1 << 22)
    manifest = json.loads((src / "manifest.json").read_text())
    if isinstance(manifest.get("traces"), dict):
        manifest["traces"] = {r: t.removesuffix(".gz") for r, t in manifest["traces"].items()}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    sizes = [p.stat().st_size for p in sorted(out.glob("rank*.json"))]
    print(f"{name}: {len(sizes)} ranks, {sum(sizes) / 1e6:.1f} MB of plain JSON", file=sys.stderr)


def profile_args(name: str) -> list[str]:
    """The ``pipeaudit profile`` options of a set (two blocks per stage)."""
    ranks, steps = SETS[name]
    shape = DENSE.get(name, ["--schedule", "1f1b", "--record-shapes"])
    stages = ranks * (2 if "--chunks" in shape else 1)
    return [*shape, "-P", str(ranks), "-M", "16", "--steps", str(steps),
            "--layers", str(2 * stages), "--hidden", "64", "--seq-len", "16", "--timeout", "3000"]


def make(name: str, out_root: Path, force: bool) -> None:
    out = out_root / name
    if (out / "manifest.json").exists() and not force:
        print(f"{name}: exists, skipped ({out})", file=sys.stderr)
        return
    if out.exists():
        shutil.rmtree(out)
    cmd = [sys.executable, "-m", "pipeaudit", "profile", *profile_args(name), "--out", str(out)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, cwd=ROOT)
    sizes = [p.stat().st_size for p in sorted(out.glob("rank*.json.gz"))]
    print(f"{name}: {len(sizes)} ranks, {sum(sizes) / 1e6:.1f} MB gzip on disk, "
          f"{time.perf_counter() - t0:.0f} s", file=sys.stderr)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sets", nargs="*", help=f"sets to make (default: all of {', '.join(SETS)})")
    ap.add_argument("--out", type=Path, default=DATA)
    ap.add_argument("--force", action="store_true", help="remake sets that exist")
    ap.add_argument("--list", action="store_true", help="print the sets and exit")
    args = ap.parse_args()
    if args.list:
        for name in SETS:
            print(f"{name:11} pipeaudit profile {' '.join(profile_args(name))}")
        for name in plain_sets():
            print(f"{name:16} {name.removesuffix(PLAIN_SUFFIX)} gunzipped (plain JSON)")
        return
    for name in args.sets or list(SETS):
        if name in plain_sets():
            make_plain(name, args.out, args.force)
            continue
        if name not in SETS:
            ap.error(f"unknown set {name!r} (sets: {', '.join([*SETS, *plain_sets()])})")
        make(name, args.out, args.force)


if __name__ == "__main__":
    main()
