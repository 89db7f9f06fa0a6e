"""The one exception type a user can cause.

Anything raised as a ZooError is the user's to fix (a bad name, file or input):
the CLI prints its message as one line and exits non-zero. Everything else is a
bug and keeps its traceback.
"""

import difflib
import json
from typing import Iterable


class ZooError(Exception):
    """A problem the user can fix; its message is one complete line."""


class UnknownName(ZooError):
    """A variant or component name that nothing registered."""


def did_you_mean(word: str, names: Iterable[str], cutoff: float = 0.5) -> str:
    """The hint that ends an "unknown ..." message: "; did you mean 'x' or 'y'?" for
    the (up to three) ``names`` closest to a mistyped ``word`` (difflib's similarity
    at least ``cutoff``); '' when none is close."""
    close = difflib.get_close_matches(word, list(names), n=3, cutoff=cutoff)
    return f"; did you mean {' or '.join(repr(name) for name in close)}?" if close else ""


SHOWN_CHARACTERS = 300  # of one string from a file or another machine, in a message


def printable(text: str, limit: int | None = SHOWN_CHARACTERS) -> str:
    """``text`` as one printable line, at most ``limit`` characters and a count:
    line breaks, ANSI escapes and other control characters escaped. Every string
    read from a hostile file or another machine passes here before a person sees
    it, so it can neither forge a line, drive the terminal, nor fill the screen."""
    shown = text if text.isprintable() else json.dumps(text, ensure_ascii=False)[1:-1]
    if limit is not None and len(shown) > limit:
        return f"{shown[:limit]}… ({len(shown):,} characters)"
    return shown


def shown_list(items: list[str], limit: int = 10) -> str:
    """The first ``limit`` of ``items``, each `printable`, and how many more there are."""
    shown = ", ".join(printable(item, 80) for item in items[:limit])
    return shown + (f" and {len(items) - limit:,} more" if len(items) > limit else "")
