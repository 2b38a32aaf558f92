"""`pipeaudit analyze`: audit a run's traces."""

from __future__ import annotations

import sys

import click

from pipeaudit.cli.output import write_output


@click.command("analyze")
@click.argument("paths", nargs=-1, required=True)
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown"]), default="text",
              show_default=True, help="Report format on stdout.")
@click.option("--schedule", default=None, help="Declare the schedule that ran (checked against the order).")
@click.option("--action-pattern", default=None, metavar="REGEX",
              help="Regex with named groups kind, mb and optionally stage, for other frameworks' spans.")
@click.option("--microbatches", type=int, default=None,
              help="Microbatches per step (for un-annotated traces without ProfilerStep spans).")
@click.option("--jobs", type=click.IntRange(min=1), default=None,
              help="Ranks decoded in parallel (default: cores).")
@click.option("--executor", default="local", show_default=True, metavar="local|processes|dask://HOST:PORT",
              help="Where ranks are decoded and reduced: this machine (a process pool when it "
                   "pays), always a process pool, or a Dask cluster (pip install 'pipeaudit[dask]').")
@click.option("--max-memory", default=None, metavar="SIZE",
              help="Memory budget of the decode, e.g. 4G (default: half the available memory); "
                   "bigger files are decoded as a stream.")
@click.option("--allow-missing", is_flag=True,
              help="Analyse a set of ranks with gaps (missing ranks are named in the notes).")
@click.option("--salvage", is_flag=True,
              help="Analyse truncated or corrupt traces (a killed job): keep the complete events "
                   "before the damage, exclude the steps it cut, and say what was lost.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Write the report to this file instead of stdout.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False), default=None,
              help="Also write a self-contained HTML report (charts, no network needed) to this file.")
@click.option("--force", is_flag=True, help="Overwrite --output / --html if they exist.")
@click.option("--with-hta", is_flag=True,
              help="Also run Holistic Trace Analysis (pipeaudit[hta]) on GPU traces and show its "
                   "idle and comm/comp overlap next to pipeaudit's per-rank figures.")
def command(paths, fmt, schedule, action_pattern, microbatches, jobs, executor, max_memory,
            allow_missing, salvage, output, html_path, force, with_hta) -> None:
    """Audit pipeline traces: PATHS are trace files, directories or globs of one run."""
    from pipeaudit import timings
    from pipeaudit.prestart import maybe_prestart

    maybe_prestart(paths, jobs, executor)  # the worker pool's imports overlap ours
    import pipeaudit
    from pipeaudit.report.step_view import step_timeline_text

    from pipeaudit.cli.output import check_writable
    from pipeaudit.errors import TraceError
    from pipeaudit.trace.load import parse_size

    check_writable(output, force=force)  # before the (possibly long) analysis
    check_writable(html_path, force=force)
    if max_memory is not None:
        try:
            max_memory = parse_size(max_memory)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--max-memory") from None
    try:
        run = pipeaudit.load(paths, schedule=schedule, action_pattern=action_pattern,
                             num_microbatches=microbatches, jobs=jobs, executor=executor,
                             max_memory=max_memory, allow_missing=allow_missing, salvage=salvage)
    except TraceError as exc:
        raise cli_trace_error(exc, paths, salvage) from None
    result = run.audit()
    timings.mark("audit")
    if html_path:
        from pipeaudit.report.html import write_html

        write_html(run.timeline, result, html_path, force=force)
        click.echo(f"wrote {html_path}", err=True)
    hta = None
    if with_hta:
        from pipeaudit.integrations.hta import compare_with_hta

        hta = compare_with_hta(run)
    if fmt == "json":
        from pipeaudit.report.json_doc import to_json

        doc = result.to_dict()
        if hta is not None:
            doc["hta"] = hta.to_dict()
        text = to_json(doc) + "\n"
    else:
        step, tl_text = step_timeline_text(run.timeline, result) if result.pipeline_found else (None, "")
        if fmt == "markdown":
            from pipeaudit.report.markdown import render_markdown

            text = render_markdown(result, timeline_text=tl_text, timeline_step=step)
        else:
            import io

            from pipeaudit.report.terminal import render_terminal

            buf = io.StringIO()
            color = sys.stdout.isatty() and output is None
            render_terminal(result, buf, timeline_text=tl_text, timeline_step=step, color=color)
            text = buf.getvalue()
        if hta is not None:
            from pipeaudit.integrations.hta import render_text

            text += ("\n## HTA alongside\n\n```\n" + render_text(hta) + "```\n"
                     if fmt == "markdown" else "\n" + render_text(hta))
    write_output(text, output, force=force)
    timings.mark("report")
    timings.report()


def cli_trace_error(exc, paths, salvage: bool):
    """The TraceError as the CLI reports it: a set-level problem names the inputs, and
    damage that ``--salvage`` can repair says so when it was not given."""
    from pipeaudit.errors import TraceError
    from pipeaudit.trace.salvage import SALVAGE_HINT, is_salvageable

    path, problem = exc.path, exc.problem
    if path is None and paths:
        path = ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
    if not salvage and is_salvageable(exc):
        problem = f"{problem}; {SALVAGE_HINT}"
    return TraceError(path, problem, exc.kind)
