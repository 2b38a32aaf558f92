"""Text that fits a terminal: every text report is at most :data:`WIDTH` columns wide.

One table style for every command (:func:`table`: rich, a rule under the header, no
borders), and long prose wrapped with a hanging indent (:func:`hanging`, :func:`fit`) so a
continuation line never starts at column 0. What cannot fit goes to ``--verbose``, JSON
and HTML.
"""

from __future__ import annotations

import io
import re
import textwrap
from typing import Any

from rich.box import Box
from rich.console import Console
from rich.table import Table

#: the widest line any text report prints
WIDTH = 120
#: how far a wrapped line's continuation is indented past the line's own indentation
HANG = 2
#: the one table style: rich's SIMPLE_HEAD drawn in ASCII (a rule of '-' under the header,
#: nothing else), so a report reads the same in a terminal, a CI log and a code block
RULE_UNDER_HEADER = Box("    \n    \n -- \n    \n    \n    \n    \n    \n", ascii=True)
#: a space before what would start a Markdown block if it began a line (a list marker, a
#: heading, a quote): kept with the word before it when a Markdown line is wrapped
_MD_MARKER = re.compile(r" (?=(?:[-+*>]|#+|\d+[.)])(?: |$))")
_GLUE = "\x00"
#: spaces at the end of a line, before any colour codes that close it
_TRAILING = re.compile(r" +((?:\x1b\[[0-9;]*m)*)$")


def table(*columns: str, title: str | None = None, **kwargs: Any) -> Table:
    """A rich table in the one style of every text report: title above on the left (print
    it with :func:`print_table`), the header underlined with '-', columns two spaces apart,
    no border."""
    return Table(*columns, title=title, title_justify="left", box=RULE_UNDER_HEADER,
                 show_edge=False, pad_edge=False, collapse_padding=True, **kwargs)


def print_table(con: Console, t: Table, *, gap: bool = True) -> None:
    """Print ``t`` on ``con``: a blank line (``gap``), its title, wrapped on its own at the
    console's width (not at the table's), then the table, without trailing spaces."""
    title, t.title = t.title, None
    if gap:
        con.print()
    if title:
        con.print(hanging(str(title), width=con.width), markup=False, highlight=False,
                  style="bold" if con.is_terminal else None)
    with con.capture() as cap:
        con.print(t)
    con.file.write("".join(_TRAILING.sub(r"\1", line) + "\n" for line in cap.get().splitlines()))


def console(file: Any, *, color: bool | None = False, width: int = WIDTH) -> Console:
    """A console writing to ``file`` at ``width`` columns (colour only when ``color``)."""
    return Console(file=file, force_terminal=color, no_color=not color, width=width,
                   highlight=False, soft_wrap=False, emoji=False)


def render(*items: Any, width: int = WIDTH) -> str:
    """Rich renderables (tables, text) printed one after another, as plain text without
    trailing spaces."""
    buf = io.StringIO()
    con = console(buf, width=width)
    for i, item in enumerate(items):
        if isinstance(item, Table):
            print_table(con, item, gap=i > 0)
        else:
            con.print(item)
    return "\n".join(line.rstrip() for line in buf.getvalue().splitlines())


def hanging(text: str, *, indent: int = 0, hang: int = HANG, width: int = WIDTH) -> str:
    """``text`` as lines of at most ``width`` columns: the first indented by ``indent``,
    the rest by ``indent + hang``. Words are never broken (a word longer than the line stays
    whole)."""
    return textwrap.fill(text, width, initial_indent=" " * indent,
                         subsequent_indent=" " * (indent + hang), break_long_words=False,
                         break_on_hyphens=False) or " " * indent


def fit(text: str, *, hang: int = HANG, width: int = WIDTH, markdown: bool = False) -> str:
    """Every line of ``text`` wider than ``width`` wrapped with a hanging indent: its
    continuation lines indented ``hang`` past the line's own indentation. Lines that fit
    are left as they are; with ``markdown``, so are table rows and fenced blocks (a wrapped
    paragraph or list item reads the same once rendered)."""
    out = []
    fenced = False
    for line in text.split("\n"):
        if markdown and line.startswith("```"):
            fenced = not fenced
        if len(line) <= width or (markdown and (fenced or line.lstrip().startswith("|"))):
            out.append(line)
            continue
        lead = len(line) - len(line.lstrip(" "))
        body = _MD_MARKER.sub(_GLUE, line.strip()) if markdown else line.strip()
        out.append(hanging(body, indent=lead, hang=hang, width=width).replace(_GLUE, " "))
    return "\n".join(out)
