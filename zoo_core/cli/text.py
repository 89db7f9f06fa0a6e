"""Names are data, not markup.

Every string the zoo shows came from somewhere it does not control: a card, a
checkpoint's tensor names, a plugin, the command line. rich reads ``[bold]``,
``[/]`` or ``[link=...]`` in a plain string as markup, so a name holding them
would be rendered (colours, terminal hyperlinks) or end in a MarkupError. Every
table cell and every line printed through rich goes through ``plain``, which
hands rich a Text object: rich never parses it. It is `printable` first (one
line, control characters and ANSI escapes escaped, capped): a cell from a
remote's index or a hostile card can neither forge a row nor drive the terminal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import printable

if TYPE_CHECKING:
    from rich.text import Text


def plain(value: object, style: str = "") -> Text:
    """``value`` as text that rich shows exactly as it is."""
    from rich.text import Text

    return Text(printable(str(value)), style=style)
