"""Every output format sits behind one registry in pipeaudit.report; the gate and the
reporters do not import each other."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import pipeaudit.report
from pipeaudit.report import RENDERERS, formats, render
from tests.support.child import run_python


@pytest.mark.parametrize("key", sorted(RENDERERS), ids=lambda k: "-".join(k))
def test_every_renderer_exists(key):
    module, name = RENDERERS[key]
    assert callable(getattr(importlib.import_module(module), name))


def test_unknown_format_names_the_known_ones():
    with pytest.raises(ValueError, match="formats: text, junit|formats: text"):
        render("gate", None, "yaml")
    assert set(formats("gate")) == {"text", "json", "junit", "github", "markdown"}


def _loaded_after(imports: list[str]) -> set[str]:
    code = ("import sys\n" + "".join(f"import {m}\n" for m in imports)
            + "print('\\n'.join(sorted(m for m in sys.modules if m.startswith('pipeaudit'))))")
    out = run_python(code)
    assert out.returncode == 0, out.stderr
    return set(out.stdout.split())


def test_gate_and_report_do_not_import_each_other():
    gate = [m.name for m in pkgutil.iter_modules(importlib.import_module("pipeaudit.gate").__path__,
                                                  "pipeaudit.gate.")]
    assert not {m for m in _loaded_after(gate) if m.startswith("pipeaudit.report")}
    reporters = [m.name for m in pkgutil.iter_modules(pipeaudit.report.__path__, "pipeaudit.report.")
                 if m.name.split(".")[-1] in ("gate_text", "gate_junit", "gate_github",
                                               "gate_markdown", "diff_text", "diff_markdown")]
    assert not {m for m in _loaded_after(reporters) if m.startswith("pipeaudit.gate")}
