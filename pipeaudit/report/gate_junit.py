"""JUnit XML reporter of a gate: one testcase per check, built with xml.etree.ElementTree.

A failed check is a ``<failure>`` carrying its explanation; a warning passes
with the explanation in ``<system-out>``; a check that could not be measured or
is switched off is ``<skipped>``.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from pipeaudit.report.gate_text import rows
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # types only: the gate does not import the reporters, nor they the gate
    from pipeaudit.gate.model import GateResult


def render_gate_junit(result: GateResult, *, suite: str = "pipeaudit gate") -> str:
    """The JUnit XML document (``<testsuites>`` with one ``<testsuite>``)."""
    n = result.counts()
    root = ET.Element("testsuites", name="pipeaudit", tests=str(len(result.checks)),
                      failures=str(n["fail"]), errors="0", skipped=str(n["skip"]))
    ts = ET.SubElement(root, "testsuite", name=suite, tests=str(len(result.checks)),
                       failures=str(n["fail"]), errors="0", skipped=str(n["skip"]))
    props = ET.SubElement(ts, "properties")
    ET.SubElement(props, "property", name="run", value=result.run_source)
    if result.baseline_source:
        ET.SubElement(props, "property", name="baseline", value=result.baseline_source)
    ET.SubElement(props, "property", name="verdict", value=result.verdict)
    for c, r in zip(result.sorted_checks(), rows(result)):
        tc = ET.SubElement(ts, "testcase", classname=f"pipeaudit.gate.{c.scope}", name=c.name)
        detail = f"baseline {r[1]}, now {r[2]}, change {r[3]}, threshold {r[4]}"
        if c.verdict == "fail":
            f = ET.SubElement(tc, "failure", message=c.explanation, type=c.metric)
            f.text = detail
        elif c.verdict == "skip":
            ET.SubElement(tc, "skipped", message=c.explanation)
        else:
            out = ET.SubElement(tc, "system-out")
            out.text = (f"WARNING: {c.explanation}" if c.verdict == "warn" else c.explanation)
    if result.notes:
        ET.SubElement(ts, "system-out").text = "\n".join(result.notes)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
