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


def printable(text: str) -> str:
    """``text`` with line breaks and control characters escaped: a name read from
    a hostile file must not break a one-line message (or the terminal)."""
    return text if text.isprintable() else json.dumps(text, ensure_ascii=False)[1:-1]


def did_you_mean(word: str, names: Iterable[str], cutoff: float = 0.5) -> str:
    """The hint that ends an "unknown ..." message: "; did you mean 'x' or 'y'?" for
    the (up to three) ``names`` closest to a mistyped ``word`` (difflib's similarity
    at least ``cutoff``); '' when none is close."""
    close = difflib.get_close_matches(word, list(names), n=3, cutoff=cutoff)
    return f"; did you mean {' or '.join(repr(name) for name in close)}?" if close else ""
