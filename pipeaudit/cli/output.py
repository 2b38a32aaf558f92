"""Where CLI reports go: stdout, or a file the user named (never overwritten without --force)."""

from __future__ import annotations

import click

from pipeaudit.outfiles import refuse_overwrite, write_text_atomic


def check_writable(path: str | None, *, force: bool) -> None:
    """Refuse to overwrite an existing output file unless forced (checked before the work)."""
    if path:
        refuse_overwrite(path, force=force)


def write_output(text: str, path: str | None, *, force: bool = False) -> None:
    """Write ``text`` to ``path`` (atomically), or to stdout when ``path`` is None."""
    if path is None:
        click.echo(text, nl=False)
        return
    write_text_atomic(path, text, force=force, what="the report")
