"""pytest plugin (tests/conftest.py loads it): prints the generated-case test's count and
seconds in pytest's terminal summary, also under pytest-xdist (the worker attaches the tally to
the test's report; the controller, which collects no test, prints it)."""

from __future__ import annotations

import pytest

_SEEN: list[dict] = []


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "tracegen: generated traces with known truth (issue 50)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and item.get_closest_marker("tracegen") is not None:
        from tests.unit.tracegen.test_generated_reading import TALLY

        report.user_properties.append(("tracegen_tally", {
            "cases": TALLY["cases"], "seconds": TALLY["seconds"],
            "verdicts": dict(TALLY["verdicts"]), "cannot_tell": dict(TALLY["cannot_tell"])}))


def pytest_runtest_logreport(report) -> None:
    for key, value in getattr(report, "user_properties", ()):
        if key == "tracegen_tally":
            _SEEN.append(value)


def pytest_terminal_summary(terminalreporter) -> None:
    for t in _SEEN:
        n, s = t["cases"], t["seconds"]
        if not n:
            continue
        v = ", ".join(f"{k} {c}" for k, c in sorted(t["verdicts"].items()))
        terminalreporter.write_line(f"generated traces: {n} cases in {s:.1f} s "
                                    f"({1000 * s / n:.0f} ms a case): {v}")
        for shape, c in sorted(t["cannot_tell"].items()):
            terminalreporter.write_line(f"  cannot tell: {shape}: {c}")
