"""One way to run ``pipeaudit`` commands in-process from the tests."""

from __future__ import annotations

from typing import Any, Mapping

from click.testing import CliRunner, Result

from pipeaudit.cli.main import cli


def invoke(*args: Any, env: Mapping[str, str | None] | None = None,
           catch_exceptions: bool = True, **kwargs: Any) -> Result:
    """Run ``pipeaudit ARGS...`` through click's runner and return its Result.

    Arguments are turned into strings (paths welcome). ``result.stdout`` and ``result.stderr``
    are kept apart; ``result.output`` is both, interleaved as a terminal shows them. ``env``
    is passed to the runner, other keywords (``input``, ``standalone_mode``...) to ``invoke``.
    """
    return CliRunner(env=env).invoke(cli, [str(a) for a in args], prog_name="pipeaudit",
                                     catch_exceptions=catch_exceptions, **kwargs)
