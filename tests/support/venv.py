"""A real virtual environment holding only pipeaudit's core dependencies: no torch, no HTA
(the newcomer who ran ``pip install pipeaudit`` without extras); ``leave_out`` removes core
ones too (matplotlib, to see ``plot`` without it).

Downloading the core wheels again takes minutes here, so the venv gets the distributions
this interpreter already has installed: each core requirement of pyproject.toml and what
it requires in turn (markers evaluated, extras not followed), linked file by file into the
venv's own site-packages, as ``pip install`` would have put them. The venv is made without
``--system-site-packages``, so nothing else of this interpreter is importable in it.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import sys
import tomllib
import venv
from pathlib import Path

from packaging.requirements import Requirement

from tests.support.paths import REPO


def core_requirements() -> list[str]:
    """The names of pyproject.toml's ``[project] dependencies`` that apply here."""
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    reqs = [Requirement(d) for d in deps]
    return [r.name for r in reqs if r.marker is None or r.marker.evaluate()]


def _closure(names: list[str], leave_out: tuple[str, ...] = ()) -> list[md.Distribution]:
    """The installed distributions of ``names`` and of everything they require (no extras),
    less ``leave_out`` (not followed either)."""
    seen: dict[str, md.Distribution] = {}
    skip = {n.lower().replace("_", "-") for n in leave_out}
    todo = list(names)
    while todo:
        name = todo.pop()
        key = name.lower().replace("_", "-")
        if key in seen or key in skip:
            continue
        dist = md.distribution(name)
        seen[key] = dist
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return list(seen.values())


def make_core_venv(root: Path, leave_out: tuple[str, ...] = ()) -> Path:
    """Create the venv at ``root`` (less the distributions ``leave_out``); returns its python."""
    venv.EnvBuilder(with_pip=False, symlinks=True).create(root)
    py = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = root / "lib" / py / "site-packages"
    for dist in _closure(core_requirements(), leave_out):
        for f in dist.files or []:
            if f.parts[0] == "..":  # scripts outside site-packages
                continue
            src = Path(dist.locate_file(f))
            dst = site / f
            if src.exists() and not dst.exists():
                dst.parent.mkdir(parents=True, exist_ok=True)
                os.symlink(src, dst)
    return root / "bin" / "python"
