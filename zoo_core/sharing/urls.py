"""What a URL the zoo downloads from must look like, checked before it is stored or opened.

Apart from download.py (which imports rich and the checkpoint reader) so that
`zoo remote add` and the shell completion of remote names stay light.
"""

from __future__ import annotations

from urllib.parse import SplitResult, urlsplit

from ..errors import ZooError, printable

HTTP_SCHEMES = ("http", "https")


def check_url(url: str, schemes: tuple[str, ...] = (*HTTP_SCHEMES, "file")) -> SplitResult:
    """``url``'s parts, refused in one line unless it is plain printable ASCII
    (a newline in a URL would forge a line wherever it is shown) with one of
    ``schemes`` and, for http(s), a host."""
    if not url or any(not 33 <= ord(character) < 127 for character in url):
        raise ZooError(
            f"{printable(url)!r}: a URL is printable ASCII without spaces (percent-encode anything else, e.g. %20)"
        )
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - parsing the port is what can fail
    except ValueError as exc:
        raise ZooError(f"{printable(url)}: not a valid URL ({exc})") from None
    if parts.scheme not in schemes:
        raise ZooError(
            f"{printable(url)}: unsupported scheme '{parts.scheme}'; " + ", ".join(f"{s}://" for s in schemes)
        )
    if parts.scheme in HTTP_SCHEMES and not parts.hostname:
        raise ZooError(f"{printable(url)}: no host in the URL")
    return parts
