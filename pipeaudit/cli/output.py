"""Where CLI reports go: stdout, or a file the user named (overwritten, as ``cp`` does; an
input never, see :func:`pipeaudit.outfiles.check_outputs`)."""

from __future__ import annotations

import click

from pipeaudit.outfiles import check_outputs, write_text_atomic

__all__ = ["FORCE_HELP", "check_outputs", "force_option", "write_output"]

#: ``--force`` of the commands that write files: kept for scripts that pass it.
FORCE_HELP = ("Accepted for old scripts; changes nothing: an output file is always overwritten "
              "(an input never).")


def force_option(fn):
    """The ``--force`` flag (see :data:`FORCE_HELP`)."""
    return click.option("--force", is_flag=True, help=FORCE_HELP)(fn)


def write_output(text: str, path: str | None) -> None:
    """Write ``text`` to ``path`` (atomically), or to stdout when ``path`` is None."""
    if path is None:
        click.echo(text, nl=False)
        return
    write_text_atomic(path, text, what="the report")
