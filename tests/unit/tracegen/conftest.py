"""Prints the generated-case test's count and seconds in pytest's terminal summary."""

from __future__ import annotations


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "tracegen: generated traces with known truth (issue 50)")


def pytest_terminal_summary(terminalreporter) -> None:
    from tests.unit.tracegen.test_generated_reading import TALLY

    if not TALLY["cases"]:
        return
    n, s = TALLY["cases"], TALLY["seconds"]
    v = ", ".join(f"{k} {c}" for k, c in sorted(TALLY["verdicts"].items()))
    terminalreporter.write_line(f"generated traces: {n} cases in {s:.1f} s ({1000 * s / n:.0f} ms a case): {v}")
    for shape, c in sorted(TALLY["cannot_tell"].items()):
        terminalreporter.write_line(f"  cannot tell: {shape}: {c}")
