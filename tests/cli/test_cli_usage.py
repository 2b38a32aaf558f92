"""Usage errors (unknown option, missing argument, bad choice, unknown command) are one
line on stderr naming the --help to read, exit code 2; help and version still work."""

from __future__ import annotations

import pytest

from tests.support.cli import invoke

CASES = [
    (["analyze"], "Missing argument 'PATHS...'", "pipeaudit analyze --help"),
    (["analyze", "x", "--nope"], "No such option '--nope'", "pipeaudit analyze --help"),
    (["plot", "x", "-o", "p.png", "--kind", "nope"], "'nope' is not one of", "pipeaudit plot --help"),
    (["simulate", "-P", "two"], "'two' is not a valid integer", "pipeaudit simulate --help"),
    (["nope"], "No such command 'nope'", "pipeaudit --help"),
]


@pytest.mark.parametrize("args,message,hint", CASES, ids=[" ".join(c[0]) for c in CASES])
def test_usage_error_is_one_line(args, message, hint):
    res = invoke(*args)
    assert res.exit_code == 2
    assert res.stdout == ""
    assert res.stderr.count("\n") == 1, res.stderr
    assert res.stderr.startswith("pipeaudit: error: ") and message in res.stderr
    assert res.stderr.rstrip().endswith(f"(see {hint})")


def test_help_and_version_still_exit_0():
    for args in (["--help"], ["analyze", "--help"], ["--version"]):
        res = invoke(*args)
        assert res.exit_code == 0 and res.stdout and res.stderr == "", args


def test_bare_command_shows_the_help():
    res = invoke()
    assert res.exit_code == 2 and "Commands:" in res.output
