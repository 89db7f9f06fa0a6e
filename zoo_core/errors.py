"""The one exception type a user can cause.

Anything raised as a ZooError is the user's to fix (a bad name, file or input):
the CLI prints its message as one line and exits non-zero. Everything else is a
bug and keeps its traceback.
"""

import json


class ZooError(Exception):
    """A problem the user can fix; its message is one complete line."""


class UnknownName(ZooError):
    """A variant or component name that nothing registered."""


def printable(text: str) -> str:
    """``text`` with line breaks and control characters escaped: a name read from
    a hostile file must not break a one-line message (or the terminal)."""
    return text if text.isprintable() else json.dumps(text, ensure_ascii=False)[1:-1]
