"""The conformance matrix: real harness runs read with and without their per-action spans.

    python benchmarks/conformance.py                 # the CI slice (14 cells)
    python benchmarks/conformance.py --all           # the whole grid
    python benchmarks/conformance.py --cells deepspeed-1f1b-p3-m5,torch-gpipe-p8-m5-mid3
    python benchmarks/conformance.py --all --keep runs/conformance -o conformance.md

Writes the markdown table (``-o``, default stdout) and ``--json`` rows; exit 1 when a cell
fails. Runs are made under ``--keep`` (reused when there already) or a temporary folder.
See docs/conformance.md.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import click

from pipeaudit.conformance.cells import CI_SLICE, full_grid
from pipeaudit.conformance.matrix import markdown, run_cells


@click.command()
@click.option("--all", "whole", is_flag=True, help="Run the whole grid, not the CI slice.")
@click.option("--cells", default=None, help="Comma-separated cell names (of the whole grid).")
@click.option("--framework", default=None, help="Only this framework's cells.")
@click.option("--list", "list_only", is_flag=True, help="List the cells and stop.")
@click.option("--keep", type=click.Path(file_okay=False), default=None,
              help="Make (and reuse) the runs here instead of a temporary folder.")
@click.option("-o", "--out", type=click.Path(dir_okay=False), default=None,
              help="Write the markdown table here.")
@click.option("--json", "json_out", type=click.Path(dir_okay=False), default=None,
              help="Write every row as JSON here.")
def main(whole: bool, cells: str | None, framework: str | None, list_only: bool,
         keep: str | None, out: str | None, json_out: str | None) -> None:
    grid = full_grid()
    chosen = grid if whole else list(CI_SLICE)
    if cells:
        names = cells.split(",")
        by_name = {c.name: c for c in grid + list(CI_SLICE)}
        unknown = [n for n in names if n not in by_name]
        if unknown:
            raise click.UsageError(f"unknown cell(s): {', '.join(unknown)}")
        chosen = [by_name[n] for n in names]
    if framework:
        chosen = [c for c in chosen if c.framework == framework]
    if list_only:
        click.echo("\n".join(c.name for c in chosen))
        click.echo(f"{len(chosen)} cells", err=True)
        return
    with tempfile.TemporaryDirectory(prefix="conformance-") as tmp:
        root = Path(keep) if keep else Path(tmp)
        root.mkdir(parents=True, exist_ok=True)

        def show(row) -> None:
            status = "pass" if row.verdict.ok else "FAIL " + "; ".join(row.verdict.problems[:2])
            click.echo(f"{row.seconds:6.1f}s {row.cell.name}: {status}", err=True)

        rows = run_cells(chosen, root, on_row=show)
    table = markdown(rows)
    if out:
        Path(out).write_text(table)
    else:
        click.echo(table)
    if json_out:
        Path(json_out).write_text(json.dumps([r.to_dict() for r in rows], indent=1))
    sys.exit(0 if all(r.verdict.ok for r in rows) else 1)


if __name__ == "__main__":
    main()
