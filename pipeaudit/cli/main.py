"""The ``pipeaudit`` command group.

Each subcommand lives in its own module ``pipeaudit.cli.<name>`` exposing a click
command called ``command``; modules are imported only when their command runs, so
``pipeaudit analyze`` never imports torch. A :class:`PipeauditError` escaping a
command becomes one line on stderr and exit code 2. Any other exception is a bug: it
also becomes one line (``pipeaudit: internal error: ...``, exit code 3) unless
``PIPEAUDIT_DEBUG=1`` asks for the traceback; Ctrl-C exits 130. Usage errors (an unknown
option, a missing argument, a bad choice) are one line too, with the ``--help`` to read,
and exit code 2.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys

import click

from pipeaudit import __version__
from pipeaudit.errors import PipeauditError

# name -> one-line help; the module pipeaudit.cli.<module> provides `command`.
COMMANDS: dict[str, tuple[str, str]] = {
    "profile": ("profile", "Run real pipelined training under torch.profiler and write traces."),
    "analyze": ("analyze", "Audit pipeline traces: timeline, bubble, overlap, memory, findings."),
    "simulate": ("simulate", "Simulate a schedule: ASCII timeline, bubble vs theory, memory."),
    "baseline": ("baseline", "Store a run's audit as a baseline for `gate`."),
    "gate": ("gate", "Fail CI when pipeline efficiency regresses against a baseline or budget."),
    "diff": ("diff", "Compare two runs stage by stage."),
    "export": ("export", "Export a run as a Perfetto/Chrome trace with pipeline tracks."),
    "plot": ("plot", "Static PNG/SVG plots of a run (timeline, bubble, memory)."),
    "sweep": ("sweep", "Profile and audit a grid of schedules x stages x microbatches."),
    "explain": ("explain", "Cross-rank critical path of each step and what limits it."),
    "whatif": ("whatif", "Replay a run with changes and predict step time and bubble."),
    "advise": ("advise", "Rank the schedules, chunks and M to run instead, under a memory cap."),
    "watch": ("watch", "Audit each profiled window of a folder as it lands (optionally gated)."),
}

#: Commands that read runs and show a rank-progress bar on a terminal when that takes a while.
SHOWS_RANK_PROGRESS = frozenset({"analyze", "baseline", "gate", "diff", "export", "plot",
                                 "explain", "whatif", "advise", "watch"})


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use; every error is one line."""

    def main(self, *args, standalone_mode: bool = True, **kwargs):  # type: ignore[override]
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            rv = super().main(*args, standalone_mode=False, **kwargs)
        except click.exceptions.UsageError as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":  # bare `pipeaudit`: the help
                exc.show()
                sys.exit(exc.exit_code)
            where = exc.ctx.command_path if exc.ctx is not None else "pipeaudit"
            click.echo(f"pipeaudit: error: {_one_line(exc.format_message())} "
                       f"(see {where} --help)", err=True)
            sys.exit(exc.exit_code)
        except click.exceptions.ClickException as exc:
            click.echo(f"pipeaudit: error: {_one_line(exc.format_message())}", err=True)
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:
            click.echo("pipeaudit: interrupted", err=True)
            sys.exit(130)
        _before_exit()
        sys.exit(rv if isinstance(rv, int) else 0)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [n for n, (mod, _) in COMMANDS.items() if _module_exists(mod)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None or not _module_exists(entry[0]):
            return None
        if cmd_name in SHOWS_RANK_PROGRESS:
            from pipeaudit.blas import one_blas_thread

            one_blas_thread()  # before the command's imports (numpy's)
        module = importlib.import_module(f"pipeaudit.cli.{entry[0]}")
        if cmd_name in SHOWS_RANK_PROGRESS and ctx is not None and not ctx.resilient_parsing:
            from pipeaudit.cli.progress_bar import rank_bar

            ctx.with_resource(rank_bar())  # until the command is done
        return module.command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(n, COMMANDS[n][1]) for n in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def invoke(self, ctx: click.Context):  # type: ignore[override]
        try:
            return super().invoke(ctx)
        except PipeauditError as exc:
            click.echo(f"pipeaudit: error: {exc}", err=True)
            ctx.exit(exc.exit_code)
        except BrokenPipeError:
            ctx.exit(0)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except KeyboardInterrupt:
            click.echo("pipeaudit: interrupted", err=True)
            ctx.exit(130)
        except ImportError as exc:
            extra = _missing_extra(exc)
            if extra is None:
                _bug(exc, ctx)
            what = ctx.invoked_subcommand or "this command"
            from pipeaudit.extras import install_line

            click.echo(f"pipeaudit: error: {what} needs {extra[0]}, which is not installed: "
                       f"{install_line(extra[1])}", err=True)
            ctx.exit(2)
        except Exception as exc:  # a bug: still one line, unless asked for the traceback
            _bug(exc, ctx)


#: Exit code of an unexpected exception (a bug), distinct from 1 (gate failed) and 2 (bad input).
INTERNAL_ERROR = 3
def _missing_extra(exc: ImportError) -> tuple[str, str] | None:
    """(what, extra) when ``exc`` is an optional dependency that is not installed (commands
    check theirs before they start, :func:`pipeaudit.extras.require`: this is the last
    resort)."""
    from pipeaudit.extras import MODULES

    name = (getattr(exc, "name", None) or "").split(".")[0]
    return MODULES.get(name) if isinstance(exc, ModuleNotFoundError) else None


def _bug(exc: BaseException, ctx: click.Context):
    """Report an unexpected exception as a bug (one line) and exit 3."""
    if os.environ.get("PIPEAUDIT_DEBUG"):
        raise exc
    first = str(exc).splitlines()[0][:200] if str(exc) else ""
    click.echo(f"pipeaudit: internal error: {type(exc).__name__}: {first}{_where(exc)} "
               "(a bug in pipeaudit; PIPEAUDIT_DEBUG=1 shows the traceback)", err=True)
    ctx.exit(INTERNAL_ERROR)


def _before_exit() -> None:
    """Spare the interpreter's teardown a collection of everything still alive (the
    imports and the command's tables): 0.1-0.3 s of every run's exit here. Objects are
    still freed and exit handlers still run."""
    import gc

    gc.freeze()


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _where(exc: BaseException) -> str:
    """`` at file.py:123`` of the innermost pipeaudit frame, for the bug report."""
    import traceback

    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.startswith(package)]
    if not frames:
        return ""
    f = frames[-1]
    return f" at {os.path.basename(f.filename)}:{f.lineno}"


def _module_exists(module: str) -> bool:
    return importlib.util.find_spec(f"pipeaudit.cli.{module}") is not None


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="pipeaudit")
def cli() -> None:
    """pipeaudit: how much of each step is pipeline bubble, is that what the
    schedule promises, and if not, why."""


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    from pipeaudit.allocator import prefer_prompt_release

    prefer_prompt_release()  # before any command imports polars
    cli.main(args=argv, prog_name="pipeaudit")


if __name__ == "__main__":  # pragma: no cover
    main(sys.argv[1:])
