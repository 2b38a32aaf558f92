"""Run conformance cells and render the matrix.

Each run is made once (cells that differ only in how they are read share it), read with its
annotations (the twin, with the manifest) and without them (:func:`strip_run`, no manifest),
and compared (:func:`pipeaudit.conformance.compare.compare`). Schedules that torch's own
runtime annotates are read as torch writes them: their spans are what every user has.
"""

from __future__ import annotations

import re
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

import pipeaudit
from pipeaudit.conformance.cells import Cell
from pipeaudit.conformance.compare import FORWARDS, LAST_STAGE, NOWHERE, Truth, Verdict, compare
from pipeaudit.conformance.strip import ACTION_SPAN, PP_SPAN, rank_files, strip_run
from pipeaudit.errors import PipeauditError


#: Which actions of each framework, read without annotations, may hold other ops than the twin's
#: (docs/conformance.md): torch's none; DeepSpeed's last stage (the loss's division by the
#: accumulation steps, forward's read bare, ``BackwardPass``'s annotated); Megatron-core's
#: forwards (its schedule's ``total_num_tokens += num_tokens`` after each ``forward_step``).
OTHER_OPS_ALLOWED = {"torch": NOWHERE, "deepspeed": LAST_STAGE, "megatron": FORWARDS}
#: Matches no span name: a copy of the traces as they are (their own annotations kept).
NOTHING = re.compile(r"(?!)")


@dataclass
class Row:
    """One cell's outcome."""

    cell: Cell
    verdict: Verdict
    read_as: str  #: "schedule P=.. v=.. M=.. steps=.." of the bare reading
    stripped: bool  #: False: the framework writes the annotations itself (read as written)
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.cell.name, **asdict(self.cell), **self.verdict.to_dict(),
                "read_as": self.read_as, "stripped": self.stripped, "seconds": self.seconds}


def framework_annotates(cell: Cell) -> bool:
    """Whether the framework itself writes per-action spans for this schedule (torch's
    action runtime): then there is nothing to strip."""
    if cell.framework != "torch":
        return False
    from pipeaudit.harness.catalog import get_spec

    return get_spec(cell.schedule).torch_annotates


def make_run(cell: Cell, root: Path) -> Path:
    """The cell's harness run under ``root`` (made once, reused by its other readings)."""
    from pipeaudit.harness import run_profile

    out = root / cell.run_key
    if (out / "manifest.json").exists():
        return out
    if out.exists():
        shutil.rmtree(out)
    run_profile(cell.config(str(out)).validate())
    return out


def read_cell(cell: Cell, run: Path, scratch: Path) -> Row:
    """Read ``run`` as ``cell`` says, with and without annotations, and compare."""
    t0 = time.perf_counter()
    files = rank_files(run)
    one = cell.reading == "one"
    ranks = [cell.one_rank] if one else list(range(len(files)))
    twin_paths = [str(files[cell.one_rank])] if one else [str(run)]
    twin_run = pipeaudit.load(twin_paths)
    stripped = cell.reading == "ops" or not framework_annotates(cell)
    bare_dir = strip_run(run, scratch / cell.name, ranks=ranks,
                         pattern=(ACTION_SPAN if cell.reading == "ops"
                                  else PP_SPAN if stripped else NOTHING),
                         shuffle_seed=0 if cell.reading == "shuffled" else None)
    bare_run = pipeaudit.load([str(p) for p in rank_files(bare_dir)], layout=cell.layout_given)
    twin, bare = twin_run.audit(), bare_run.audit()
    config = cell.config("x")
    positions = (config.layout.coords(cell.one_rank)["pp"],) if one else None
    truth = Truth(cell.schedule, cell.P, config.num_chunks, cell.M, 2, cell.dp, tuple(ranks),
                  positions, other_ops_allowed=OTHER_OPS_ALLOWED[cell.framework] if stripped else None,
                  may_be_uncertain=cell.may_be_uncertain)
    verdict = compare(truth, twin, twin_run.actions(), bare, bare_run.actions())
    read_as = (f"{bare.schedule} P={bare.num_ranks} v={bare.num_chunks} "
               f"M={bare.num_microbatches} steps={bare.num_steps}")
    shutil.rmtree(bare_dir, ignore_errors=True)
    return Row(cell, verdict, read_as, stripped, time.perf_counter() - t0)


def run_cells(cells: Iterable[Cell], root: Path, *,
              on_row: Callable[[Row], None] | None = None) -> list[Row]:
    """Run and read every cell (a failing run is a failing row, not an exception)."""
    rows = []
    scratch = root / "_bare"
    for cell in cells:
        t0 = time.perf_counter()
        try:
            run = make_run(cell, root)
            row = read_cell(cell, run, scratch)
            row.seconds = time.perf_counter() - t0
        except (PipeauditError, OSError, RuntimeError) as e:
            row = Row(cell, Verdict([f"{type(e).__name__}: {e}"]), "-", True,
                      time.perf_counter() - t0)
        rows.append(row)
        if on_row:
            on_row(row)
    return rows


def markdown(rows: list[Row]) -> str:
    """The matrix as a markdown table, one line per cell, then the count."""
    head = ("| cell | read as (bare) | max Δbubble | max Δcompute | other ops | coverage | result |\n"
            "|---|---|---|---|---|---|---|\n")
    lines = []
    for r in rows:
        v = r.verdict
        db = "-" if v.max_bubble_diff is None else f"{v.max_bubble_diff:.4f}"
        dc = "-" if v.max_compute_diff is None else f"{v.max_compute_diff:.1%}"
        cov = "-" if v.coverage is None else f"{v.coverage:.2f}"
        moved = "-" if v.other_ops is None else f"{v.other_ops[0]}/{v.other_ops[1]}"
        result = ("pass" if v.ok else "FAIL: " + "; ".join(v.problems[:3]).replace("|", "/"))
        if v.ok and v.uncertain:
            result = "pass: cannot tell (READING_UNCERTAIN)"
        if not r.stripped:
            result += " (torch's own spans)"
        lines.append(f"| {r.cell.name} | {r.read_as} | {db} | {dc} | {moved} | {cov} | {result} |")
    passed = sum(r.verdict.ok for r in rows)
    return head + "\n".join(lines) + f"\n\n{passed} of {len(rows)} cells pass.\n"
