"""The optional dependencies (the package's extras), in one place.

A command that needs an extra calls :func:`require` before it starts work: one
:class:`~pipeaudit.errors.ConfigError` line (exit 2) naming what is missing and the install
line, e.g. ``profile needs PyTorch, which is not installed: pip install 'pipeaudit[harness]'``.
The CLI's last resort for an optional module missing deeper down reads :data:`MODULES`.
Only :mod:`importlib.util` is imported: checking does not import the extra.
"""

from __future__ import annotations

import importlib.util

from pipeaudit.errors import ConfigError

#: extra -> the modules it provides, checked in order
EXTRAS: dict[str, tuple[str, ...]] = {
    "harness": ("torch",),
    "plot": ("matplotlib",),
    "hta": ("hta",),  # the traceinsight distribution
    "deepspeed": ("torch", "deepspeed"),
    "megatron": ("torch", "megatron.core"),
    "dask": ("dask", "distributed"),
    "notebooks": ("nbclient", "nbformat"),
}
#: top-level module -> (what to call it, the extra that installs it)
MODULES: dict[str, tuple[str, str]] = {
    "torch": ("PyTorch", "harness"),
    "matplotlib": ("matplotlib", "plot"),
    "hta": ("Holistic Trace Analysis (traceinsight)", "hta"),
    "deepspeed": ("DeepSpeed", "deepspeed"),
    "megatron": ("Megatron-core", "megatron"),
    "dask": ("Dask", "dask"),
    "distributed": ("Dask distributed", "dask"),
    "nbclient": ("nbclient", "notebooks"),
    "nbformat": ("nbformat", "notebooks"),
}


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a broken one
        return False


def missing(extra: str) -> str | None:
    """The first module of ``extra`` that is not installed, None when all are."""
    return next((m for m in EXTRAS[extra] if not _installed(m)), None)


def install_line(extra: str) -> str:
    """``pip install 'pipeaudit[EXTRA]'``."""
    return f"pip install 'pipeaudit[{extra}]'"


def require(extra: str, what: str) -> None:
    """Raise the one-line error when ``extra`` is not installed; ``what`` needs it (a
    command, or a command and the option: ``plot``, ``analyze --with-hta``)."""
    gone = missing(extra)
    if gone is None:
        return
    name = MODULES.get(gone.split(".")[0], (gone, extra))[0]
    raise ConfigError(f"{what} needs {name}, which is not installed: {install_line(extra)}")
