"""``pipeaudit simulate``: replay a schedule, draw it, and set it against its closed form."""

from __future__ import annotations

import json

import click

from pipeaudit.errors import ConfigError, ScheduleError
from pipeaudit.schedules import SCHEDULE_NAMES, build_schedule, load_schedule_file, save_schedule_file
from pipeaudit.cli.output import FORCE_HELP, check_outputs
from pipeaudit.outfiles import write_text_atomic
from pipeaudit.report.replay_chrome import chrome_trace_events, write_chrome_trace
from pipeaudit.schedules.simulation import (
    Durations,
    Simulation,
    chunks_for,
    simulate,
    simulate_schedule,
    sweep,
)
from pipeaudit.report import render
from pipeaudit.schedules.block_files import format_block_json
from pipeaudit.schedules.block_library import NAMED_BLOCKS, block_from_option
from pipeaudit.schedules.blocks import block_summary, build_from_block


def _int_list(text: str | None, option: str) -> list[int] | None:
    if text is None:
        return None
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"{option} takes comma-separated integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise ConfigError(f"{option} takes positive integers, got {text!r}")
    return values


def _names(text: str) -> list[str]:
    names = [x.strip() for x in text.split(",") if x.strip()]
    if not names:
        raise ConfigError("--compare takes a comma-separated list of schedule names")
    return names


@click.command(name="simulate")
@click.option("--schedule", "-s", "schedule_name", default="1f1b", show_default=True,
              help=f"Catalogue schedule: {', '.join(SCHEDULE_NAMES)}.")
@click.option("-P", "--ranks", "num_ranks", type=int, help="Pipeline ranks P.")
@click.option("-M", "--microbatches", "num_microbatches", type=int, help="Microbatches M.")
@click.option("-v", "--chunks", type=int, default=None,
              help="Stages per rank (interleaved-1f1b, looped-bfs, interleaved-zb; default 2).")
@click.option("--tf", type=float, default=1.0, show_default=True,
              help="Forward time of one rank's share of the model (each of v chunks: tf/v).")
@click.option("--tb", type=float, default=2.0, show_default=True,
              help="Full backward time per rank (B = I + W when the backward is split).")
@click.option("--tw", type=float, default=None,
              help="Weight-gradient part of --tb for split-backward schedules [default: tb/2].")
@click.option("--comm", type=float, default=0.0, show_default=True,
              help="Latency added to every dependency that crosses ranks.")
@click.option("--compare", "compare", default=None, metavar="A,B,...",
              help="Simulate several schedules side by side.")
@click.option("--sweep-microbatches", "sweep_mb", default=None, metavar="M1,M2,...",
              help="Tabulate bubble and memory against M.")
@click.option("--schedule-file", type=click.Path(dir_okay=False), default=None,
              help="Simulate a user schedule (CSV or JSON of per-rank actions).")
@click.option("--building-block", "building_block", default=None, metavar="FILE|NAME",
              help=f"Build the schedule from a building block: a file (JSON or CSV of passes "
                   f"with stage, kind and offset) or a named block ({', '.join(NAMED_BLOCKS)}).")
@click.option("--interval", type=float, default=None,
              help="Repeat interval of the building block [default: the file's, or the busiest "
                   "rank's work in the block].")
@click.option("--placement", type=click.Choice(["loop", "v"]), default=None,
              help="Stage placement of a building-block file [default: the file's, or loop].")
@click.option("--reorder", is_flag=True,
              help="With --building-block: run warm-up and cool-down passes earlier when they "
                   "can, without raising any peak memory.")
@click.option("--save-block", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write the building block as JSON (a starting point for your own).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True)
@click.option("--chrome-trace", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write the simulated timeline as Chrome-trace JSON (Perfetto).")
@click.option("--save-schedule", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write the schedule's per-rank orders (CSV, or JSON for *.json).")
@click.option("--max-cells", type=click.IntRange(10, 100000), default=160, show_default=True,
              help="Widest timeline, in time cells.")
@click.option("--force", is_flag=True, help=FORCE_HELP)
def command(schedule_name: str, num_ranks: int | None, num_microbatches: int | None,
            chunks: int | None, tf: float, tb: float, tw: float | None, comm: float,
            compare: str | None, sweep_mb: str | None, schedule_file: str | None,
            building_block: str | None, interval: float | None, placement: str | None,
            reorder: bool, save_block: str | None, fmt: str,
            chrome_trace: str | None, save_schedule: str | None, max_cells: int,
            force: bool) -> None:
    """Simulate a pipeline schedule: ASCII timeline, bubble per rank and overall against the
    closed form (formula named), peak in-flight microbatches per stage against theory.

    Durations are per rank and per microbatch; a rank with v chunks runs each for 1/v of them.
    """
    check_outputs({"--chrome-trace": chrome_trace, "--save-schedule": save_schedule,
                   "--save-block": save_block}, [schedule_file, building_block])
    durations = Durations(tf, tb, tw, comm)
    if building_block is not None:
        if compare or sweep_mb or schedule_file:
            raise ConfigError("--building-block cannot be combined with --compare, "
                              "--sweep-microbatches or --schedule-file")
        _simulate_block(building_block, num_ranks, num_microbatches, chunks, interval, placement,
                        reorder, durations, fmt, max_cells, chrome_trace, save_schedule, save_block)
        return
    if interval is not None or placement is not None or reorder or save_block:
        raise ConfigError("--interval, --placement, --reorder and --save-block go with "
                          "--building-block")
    microbatches = _int_list(sweep_mb, "--sweep-microbatches")
    if sum(x is not None for x in (compare, microbatches, schedule_file)) > 1 and not (
        compare and microbatches
    ):
        raise ConfigError("--schedule-file cannot be combined with --compare or --sweep-microbatches")
    if schedule_file is not None:
        sched = load_schedule_file(schedule_file)
        sims = [simulate_schedule(sched, durations)]
        _emit_single(sims[0], fmt, max_cells)
        _side_outputs(sims, chrome_trace, save_schedule)
        return
    if num_ranks is None:
        raise ConfigError("-P/--ranks is required (or give --schedule-file)")
    if microbatches is not None:
        if chrome_trace or save_schedule:
            raise ConfigError("--chrome-trace and --save-schedule need one schedule or --compare, "
                              "not --sweep-microbatches")
        names = _names(compare) if compare else [schedule_name]
        rows = sweep(names, num_ranks, microbatches, chunks, durations)
        click.echo(render("microbatch-sweep", rows, fmt, num_ranks=num_ranks), nl=fmt != "json")
        return
    if num_microbatches is None:
        raise ConfigError("-M/--microbatches is required (or give --sweep-microbatches)")
    if compare:
        items: list[Simulation | tuple[str, str]] = []
        for name in _names(compare):
            try:
                items.append(simulate(name, num_ranks, num_microbatches, chunks_for(name, chunks),
                                      durations))
            except ScheduleError as exc:
                items.append((name, str(exc)))
        click.echo(render("comparison", items, fmt, max_cells=max_cells), nl=fmt != "json")
        sims = [i for i in items if not isinstance(i, tuple)]
        if save_schedule:
            raise ConfigError("--save-schedule needs a single schedule, not --compare")
        _side_outputs(sims, chrome_trace, None)
        return
    sched = build_schedule(schedule_name, num_ranks, num_microbatches, chunks)
    sim = simulate_schedule(sched, durations)
    _emit_single(sim, fmt, max_cells)
    _side_outputs([sim], chrome_trace, save_schedule)


def _simulate_block(source: str, num_ranks: int | None, num_microbatches: int | None,
                    chunks: int | None, interval: float | None, placement: str | None,
                    reorder: bool, durations: Durations, fmt: str, max_cells: int,
                    chrome_trace: str | None, save_schedule: str | None,
                    save_block: str | None) -> None:
    """``--building-block``: build, simulate and report the schedule of a block."""
    block = block_from_option(source, num_ranks, chunks, interval, placement)
    if num_microbatches is None:
        raise ConfigError("-M/--microbatches is required with --building-block")
    sched = build_from_block(block, num_microbatches, reorder=reorder,
                             name=f"{block.name}+reorder" if reorder else block.name)
    sim = simulate_schedule(sched, durations)
    info = block_summary(block, sched, reordered=reorder)
    click.echo(render("simulation", sim, fmt, max_cells=max_cells, info=info), nl=False)
    _side_outputs([sim], chrome_trace, save_schedule)
    if save_block:
        write_text_atomic(save_block, format_block_json(block) + "\n", what="the building block")
        click.echo(f"wrote building block {save_block}", err=True)


def _emit_single(sim: Simulation, fmt: str, max_cells: int) -> None:
    click.echo(render("simulation", sim, fmt, max_cells=max_cells), nl=False)


def _side_outputs(sims: list[Simulation], chrome_trace: str | None, save_schedule: str | None) -> None:
    if chrome_trace:
        if len(sims) == 1:
            write_chrome_trace(sims[0].result, chrome_trace, label=sims[0].schedule.name)
        else:
            events: list[dict] = []
            offset = 0
            for sim in sims:
                doc = chrome_trace_events(sim.result, label=sim.schedule.name)
                for ev in doc["traceEvents"]:
                    ev = dict(ev, pid=ev["pid"] + offset)
                    if ev["name"] == "process_sort_index":
                        ev["args"] = {"sort_index": ev["pid"]}
                    events.append(ev)
                offset += sim.schedule.num_ranks
            write_text_atomic(chrome_trace, json.dumps({"traceEvents": events,
                                                        "displayTimeUnit": "ms"}),
                              what="the Chrome trace")
        click.echo(f"wrote Chrome trace {chrome_trace}", err=True)
    if save_schedule:
        save_schedule_file(sims[0].schedule, save_schedule)
        click.echo(f"wrote schedule {save_schedule}", err=True)
