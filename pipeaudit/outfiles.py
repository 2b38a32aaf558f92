"""Writing output files safely: never over an existing file unless forced, never half-written.

Every file pipeaudit writes (reports, exports, plots, manifests, sweep results) goes through
:func:`atomic_path`: the content is written to a temporary file next to the target and renamed
over it only once complete, so a reader (or a crash) never sees half a file, and an existing
file is kept untouched when writing fails.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from pipeaudit.errors import ConfigError


def refuse_overwrite(path: str | os.PathLike, *, force: bool) -> None:
    """Raise ConfigError when ``path`` exists and ``force`` is not set."""
    if not force and os.path.exists(path):
        raise ConfigError(f"{os.fspath(path)}: exists; pass --force to overwrite it")


def _reason(exc: OSError) -> str:
    from pipeaudit.trace.source import os_problem

    return os_problem(exc).removeprefix("cannot read: ")


@contextmanager
def atomic_path(path: str | os.PathLike, *, force: bool = True, what: str = "the output",
                suffix: str = "") -> Iterator[str]:
    """Yield a temporary path next to ``path``; when the block ends normally it replaces
    ``path``. An OSError becomes one ConfigError line naming ``path`` and ``what``; the
    temporary file is removed on every exit. ``suffix`` keeps an extension for writers that
    choose the format from the name."""
    refuse_overwrite(path, force=force)
    target = os.fspath(path)
    directory, name = os.path.split(target)
    tmp = os.path.join(directory, f".{name}.tmp-{os.getpid()}{suffix}")
    try:
        yield tmp
        os.replace(tmp, target)
    except OSError as exc:
        raise ConfigError(f"{target}: cannot write {what}: {_reason(exc)}") from None
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def write_text_atomic(path: str | os.PathLike, text: str, *, force: bool = True,
                      what: str = "the output") -> None:
    """Write ``text`` (UTF-8) to ``path`` through :func:`atomic_path`."""
    with atomic_path(path, force=force, what=what) as tmp:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
