"""Tables for the terminal, drawn by rich.

On a terminal a table fits its width; into a pipe or a file it is plain text at
its natural width (no colour, no wrapping), so `zoo list | grep` sees whole rows.
rich is imported here, not in `cli.py`: commands that print no table never pay
for it.
"""

from __future__ import annotations

import io
import sys
from typing import Collection, Sequence

from .text import plain

_NO_WRAP_WIDTH = 10_000


def render_table(headers: list[str], rows: Sequence[Sequence[object]], right: Collection[int] = frozenset()) -> str:
    """The table as text: a header line, a rule, one line per row."""
    from rich import box, console, table

    drawn = table.Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold")
    for index, header in enumerate(headers):
        drawn.add_column(plain(header), justify="right" if index in right else "left", no_wrap=not sys.stdout.isatty())
    for row in rows:
        drawn.add_row(*(plain(cell) for cell in row))
    terminal = sys.stdout.isatty()
    buffer = io.StringIO()
    writer = console.Console(
        file=buffer,
        force_terminal=terminal,
        no_color=not terminal,
        highlight=False,
        width=None if terminal else _NO_WRAP_WIDTH,
        color_system="auto" if terminal else None,
    )
    if terminal:
        writer.size = console.Console().size  # the real terminal's width, not the buffer's
    writer.print(drawn)
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines())
