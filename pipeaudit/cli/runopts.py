"""The options of every command that reads a run, declared once.

``@run_options`` adds the flags of :class:`~pipeaudit.options.LoadOptions` to a command;
the command collects them with ``**run`` and turns them into options with
:func:`load_options`, which names the flag in its one-line error.
"""

from __future__ import annotations

from typing import Any, Callable

import click

from pipeaudit.options import LoadOptions, OptionError

#: LoadOptions field -> (flag, click keyword arguments); the click parameter is the flag's name.
_SPECS: dict[str, tuple[str, dict[str, Any]]] = {
    "schedule": ("--schedule", dict(
        default=None, metavar="NAME",
        help="Declare the schedule that ran (checked against the order; names as in "
             "`pipeaudit simulate --help`).")),
    "action_pattern": ("--action-pattern", dict(
        default=None, metavar="REGEX",
        help="Regex with named groups kind, mb and optionally stage, for other frameworks' "
             "spans.")),
    "num_microbatches": ("--microbatches", dict(
        type=click.IntRange(min=1), default=None, metavar="M",
        help="Microbatches per step, for traces that show neither steps nor M.")),
    "num_steps": ("--steps", dict(
        type=click.IntRange(min=1), default=None, metavar="N",
        help="Steps in the traces, for traces that show neither steps nor M.")),
    "layout": ("--layout", dict(
        default=None, metavar="pp=P,dp=D[,tp=T]",
        help="Which ranks form each pipeline replica, as a DeviceMesh lays them out (first "
             "dimension outermost), when the traces' process groups do not say.")),
    "jobs": ("--jobs", dict(
        type=click.IntRange(min=1), default=None, metavar="N",
        help="Ranks decoded in parallel on this machine (default: the cores, or a process per "
             "rank for up to two ranks per core and 16 ranks).")),
    "executor": ("--executor", dict(
        default=None, metavar="local|processes|dask://HOST:PORT",
        help="Where ranks are decoded and reduced: this machine (a process pool when it pays), "
             "always a process pool, or a Dask cluster (pip install 'pipeaudit[dask]'). "
             "[default: local]")),
    "max_memory": ("--max-memory", dict(
        default=None, metavar="SIZE",
        help="Memory budget of the decode, e.g. 4G (default: half the available memory); "
             "bigger files are decoded as a stream.")),
    "allow_missing": ("--allow-missing", dict(
        is_flag=True, help="Read a set of ranks with gaps (the missing ranks are named).")),
    "salvage": ("--salvage", dict(
        is_flag=True,
        help="Read truncated or corrupt traces (a killed job): keep the complete events before "
             "the damage, exclude the steps it cut, and say what was lost.")),
}
#: ``whatif`` changes the schedule and M of the replay: its flags for the traces' own differ.
WHATIF_FLAGS = {"schedule": "--run-schedule", "num_microbatches": "--run-microbatches"}
#: The same flags under whatif's names, accepted by every other command that reads a run too, so
#: that one message (the uncertain reading's) can name them for all.
RUN_ALIASES = dict(WHATIF_FLAGS)


def _param(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def run_options(f: Callable[..., Any] | None = None, *, flags: dict[str, str] | None = None):
    """Add the flags of every :class:`LoadOptions` field to a click command (``flags``: other
    flag names for some fields)."""
    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        for field, (flag, kwargs) in reversed(list(_SPECS.items())):
            names = [(flags or {}).get(field, flag)]
            if field not in (flags or {}) and field in RUN_ALIASES:
                names.append(RUN_ALIASES[field])  # the name every command's messages give it
            fn = click.option(*names, **kwargs)(fn)
        return fn

    return decorate(f) if f is not None else decorate


def replica_report_options(verb: str, *, flags: dict[str, str] | None = None):
    """The options of a command that reports on one pipeline replica of a run: ``--format``,
    ``--pipeline`` (the replica to ``verb``), the run's flags (:func:`run_options`),
    ``-o/--output`` and ``--force``, in that order in ``--help``."""
    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        from pipeaudit.cli.output import force_option

        fn = force_option(fn)
        fn = click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
                          help="Write the report to this file instead of stdout.")(fn)
        fn = run_options(fn, flags=flags)
        fn = click.option("--pipeline", type=click.IntRange(min=0), default=None, metavar="D",
                          help=f"Pipeline replica to {verb} (default: the slowest, when the job "
                               "has several).")(fn)
        return click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown"]),
                            default="text", show_default=True, help="Report format on stdout.")(fn)

    return decorate


def load_options(params: dict[str, Any], *, flags: dict[str, str] | None = None,
                 **overrides: Any) -> LoadOptions:
    """The LoadOptions of a command's parsed flags (removed from ``params``); a bad value is a
    one-line usage error naming the flag."""
    names = {field: (flags or {}).get(field, flag) for field, (flag, _) in _SPECS.items()}
    values = {field: params.pop(_param(flag), None) for field, flag in names.items()}
    values["allow_missing"] = bool(values["allow_missing"])
    values["salvage"] = bool(values["salvage"])
    values.update(overrides)
    try:
        options = LoadOptions(**values)
    except OptionError as exc:
        raise click.BadParameter(exc.reason, param_hint=names.get(exc.option, exc.option)) from None
    if (options.executor or "").startswith("dask://"):
        from pipeaudit.extras import require

        require("dask", f"{names['executor']} dask://...")
    return options


#: What a user can do when no pipeline is found: every command that reads a run has the flag.
NO_PIPELINE_HINT = ("if the run names its forward/backward spans its own way, give --action-pattern "
                    "REGEX (docs/profiling-your-own-training.md)")


def load_run(paths, options: LoadOptions, *, needs_pipeline: bool = True,
             flags: dict[str, str] | None = None):
    """``pipeaudit.load`` for a command: a trace error names the inputs when it concerns the
    set, and damage that ``--salvage`` can repair says so when it was not given. A run without
    a pipeline (:func:`pipeaudit.audit.found.no_pipeline_error`, the rule of every command) is
    an input error (exit 2) for a command that ``needs_pipeline``, else a note on stderr; so
    is ``--steps`` / ``--microbatches`` (named as in ``flags``) that the traces overrode."""
    import pipeaudit
    from pipeaudit.errors import TraceError

    try:
        run = pipeaudit.load(paths, options=options)
    except TraceError as exc:
        raise cli_trace_error(exc, list(paths), options.salvage) from None
    from pipeaudit.audit.found import no_pipeline_error

    err = no_pipeline_error(run, list(paths), NO_PIPELINE_HINT)
    if err is not None:
        if needs_pipeline:
            raise err
        click.echo(f"pipeaudit: note: {err}", err=True)
    elif options.num_steps or options.num_microbatches:
        names = {f: (flags or {}).get(f, flag) for f, (flag, _) in _SPECS.items()}
        note = stated_values_note(run.audit(), {names["num_steps"]: options.num_steps,
                                                names["num_microbatches"]: options.num_microbatches})
        if note:
            click.echo(f"pipeaudit: note: {note}", err=True)
    return run


def stated_values_note(result, stated: dict[str, int | None]) -> str | None:
    """What the run says when the steps and M stated (flag -> value: the steps' flag first,
    then M's) differ from the ones the traces show themselves: the traces' are used (the flags
    are for traces that show neither)."""
    (steps_flag, steps), (m_flag, m) = stated.items()
    unused = []
    if steps and steps != result.num_steps:
        unused.append(f"{steps_flag} {steps}")
    if m and result.num_microbatches is not None and m != result.num_microbatches:
        unused.append(f"{m_flag} {m}")
    if not unused:
        return None
    shown = f"M={result.num_microbatches}" if result.num_microbatches is not None else "M=?"
    one = len(unused) == 1
    return (f"the traces show {result.num_steps} step(s) of {shown} microbatches (steps from "
            f"{result.step_evidence}), which are used: {' and '.join(unused)} "
            f"{'was' if one else 'were'} not ({'it is' if one else 'they are'} for traces that "
            "show neither)")


def cli_trace_error(exc, paths: list[str], salvage: bool):
    """The TraceError as the CLI reports it (see :func:`load_run`)."""
    from pipeaudit.audit.found import describe_paths
    from pipeaudit.errors import TraceError
    from pipeaudit.trace.salvage import SALVAGE_HINT, is_salvageable

    path, problem = exc.path, exc.problem
    if path is None and paths:
        path = describe_paths(paths)
    if not salvage and is_salvageable(exc):
        problem = f"{problem}; {SALVAGE_HINT}"
    return TraceError(path, problem, exc.kind)


def one_pipeline(run, index: int | None):
    """(the run of one pipeline replica, a note saying which) for commands that read one
    pipeline at a time: ``index``, else the slowest replica when the job has several."""
    from pipeaudit.errors import ConfigError

    layout = run.timeline.layout
    count = len(layout.replicas) if layout is not None else 1
    if index is None and count < 2:
        return run, None
    if index is not None and index >= count:
        raise ConfigError(f"--pipeline {index}: the job has {count} pipeline replica(s), 0..{count - 1}")
    if index is None:
        index = (run.audit().job or {}).get("slowest_pipeline") or 0
        return run.pipeline(index), (f"the job has {count} pipeline replicas; this is pipeline "
                                     f"{index}, the slowest (--pipeline D for another)")
    return run.pipeline(index), f"pipeline {index} of the job's {count}"


def missing_ranks(run) -> str | None:
    """``ranks 0, 2-3 of 4`` when ranks of the job have no trace, else None."""
    from pipeaudit.report.run_facts import ranks_text

    res = run.audit()
    if not res.ranks_missing:
        return None
    world = len(res.ranks_present) + len(res.ranks_missing)
    return f"ranks {ranks_text(res.ranks_missing)} of {world}"


def require_every_rank(run, command: str, why: str) -> None:
    """One line (exit 2) when ``command`` cannot work with ranks missing."""
    from pipeaudit.errors import ConfigError

    gone = missing_ranks(run)
    if gone:
        raise ConfigError(f"{command} needs every rank of the pipeline ({why}); {gone} have no "
                          "trace: `pipeaudit analyze` reports what the ranks present show")


def note_missing_ranks(run, command: str, what: str) -> None:
    """One line on stderr saying what ``command`` does with ranks missing."""
    gone = missing_ranks(run)
    if gone:
        click.echo(f"pipeaudit: note: {gone} have no trace: {command} {what}", err=True)
