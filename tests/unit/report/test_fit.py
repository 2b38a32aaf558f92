"""report/fit.py: the one table style and the hanging indent every text report uses."""

from __future__ import annotations

import io

from pipeaudit.report.fit import WIDTH, console, fit, hanging, print_table, render, table


def test_hanging_indents_every_continuation():
    text = hanging("word " * 60, indent=8, hang=2, width=40)
    lines = text.splitlines()
    assert len(lines) > 2 and all(len(line) <= 40 for line in lines)
    assert lines[0].startswith(" " * 8 + "word") and all(
        line.startswith(" " * 10 + "word") for line in lines[1:])


def test_a_word_longer_than_the_line_stays_whole():
    assert hanging("a " + "x" * 50 + " b", width=20).splitlines() == ["a", "  " + "x" * 50, "  b"]


def test_fit_leaves_what_fits_and_wraps_the_rest_from_its_own_indent():
    short = "  - short line"
    long = "  - " + "word " * 40
    out = fit(short + "\n" + long, width=60).splitlines()
    assert out[0] == short
    assert out[1].startswith("  - word") and all(line.startswith("    word") for line in out[2:])
    assert max(map(len, out)) <= 60


def test_markdown_keeps_tables_fences_and_never_starts_a_block():
    row = "| " + " | ".join(["cell"] * 40) + " |"
    fence = "```\n" + "x " * 80 + "\n```"
    prose = "- " + "gap - theory " * 12 + "1. more # not a heading > not a quote " * 3
    out = fit("\n".join([row, fence, prose]), width=50, markdown=True).splitlines()
    assert out[0] == row and out[2] == ("x " * 80)
    wrapped = out[4:]
    assert len(wrapped) > 3 and max(map(len, wrapped)) <= 50
    for line in wrapped[1:]:  # a continuation never reads as a list item, heading or quote
        assert not line.lstrip().startswith(("- ", "+ ", "* ", "# ", "> ", "1. "))
    assert " ".join(line.strip() for line in wrapped) == prose.strip()


def test_one_table_style_ascii_title_above_no_trailing_spaces():
    t = table("name", "value", title="A title much longer than the table itself, wrapped on "
                                     "its own at the console's width and not the table's")
    t.add_row("x", "1")
    t.add_row("longer name", "22")
    text = render(t, width=60)
    lines = text.splitlines()
    assert text.isascii()
    assert lines[0].startswith("A title much longer") and len(lines[0]) > 20  # not the table's width
    header = next(i for i, line in enumerate(lines) if line.startswith("name"))
    assert set(lines[header + 1]) == {"-"} and lines[header + 2].startswith("x ")
    assert all(line == line.rstrip() for line in lines)


def test_print_table_in_colour_keeps_the_layout():
    def show(color: bool) -> str:
        buf = io.StringIO()
        t = table("check", "verdict", title="Checks")
        t.add_row("bubble", "[red]FAIL[/]")
        print_table(console(buf, color=color, width=WIDTH), t)
        return buf.getvalue()
    import re

    coloured, plain = show(True), show(False)
    assert "\x1b[" in coloured and re.sub(r"\x1b\[[0-9;]*m", "", coloured) == plain
