"""Where CLI reports go: stdout, or a file the user named (never overwritten without --force)."""

from __future__ import annotations

import os

import click

from pipeaudit.errors import ConfigError


def check_writable(path: str | None, *, force: bool) -> None:
    """Refuse to overwrite an existing output file unless forced."""
    if path and os.path.exists(path) and not force:
        raise ConfigError(f"{path}: exists; pass --force to overwrite it")


def write_output(text: str, path: str | None, *, force: bool = False) -> None:
    """Write ``text`` to ``path`` (atomically), or to stdout when ``path`` is None."""
    if path is None:
        click.echo(text, nl=False)
        return
    check_writable(path, force=force)
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        from pipeaudit.trace.source import os_problem

        raise ConfigError(f"{path}: cannot write the report: {os_problem(exc)}") from None
