"""Fetching a remote's index and archives, bounded in every way a remote could abuse.

- time: every connect and every read waits at most ``ZOO_HTTP_TIMEOUT`` seconds;
- size: an archive is read up to the size its index gives and no further, an
  index up to ``MAX_INDEX_BYTES``, anything at most ``ZOO_MAX_DOWNLOAD`` bytes;
- redirects: at most ``MAX_REDIRECTS``, to http(s) only.

An archive downloads into ``NAME.part`` beside its target; a connection cut
part way resumes from the partial file's size with a ``Range`` request (also in
a later command: the partial file stays), and nothing becomes the target before
its size and sha256 match what was expected. ``file://`` URLs (a shared folder)
go through the same functions, reading the file instead of a response.
"""

from __future__ import annotations

import http.client
import os
import re
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import BinaryIO, Callable
from urllib.parse import urlsplit
from urllib.request import url2pathname

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

from ..catalogue.limits import parse_size
from ..errors import ZooError
from ..storage.checkpoints import sha256_file
from ..storage.files import describe_os_error, exclusive_lock, make_folder, open_regular
from ..version import __version__

MAX_REDIRECTS = 5
MAX_INDEX_BYTES = 64 << 20
MAX_ATTEMPTS = 4  # one download and up to three resumptions, each after progress was made
DEFAULT_TIMEOUT = 30.0
DEFAULT_MAX_DOWNLOAD = "16G"
CHUNK = 1 << 16


def timeout() -> float:
    text = os.environ.get("ZOO_HTTP_TIMEOUT")
    if not text:
        return DEFAULT_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        value = -1
    if not 0 < value < 86400:
        raise ZooError(f"ZOO_HTTP_TIMEOUT must be a number of seconds, not {text!r}")
    return value


def max_download() -> int:
    return parse_size(os.environ.get("ZOO_MAX_DOWNLOAD") or DEFAULT_MAX_DOWNLOAD, "ZOO_MAX_DOWNLOAD")


class _BoundedRedirects(urllib.request.HTTPRedirectHandler):
    max_redirections = MAX_REDIRECTS
    max_repeats = 1  # the same URL twice is a loop

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        if urlsplit(newurl).scheme not in ("http", "https"):
            raise ZooError(f"{req.full_url}: redirected to {newurl}, which is not http(s); refused")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


_opener = urllib.request.build_opener(_BoundedRedirects)


class _Interrupted(Exception):
    """The transfer stopped part way (cut connection, timeout): worth resuming."""


def _user_agent() -> str:
    return f"zoo/{__version__}"


def open_url(url: str, offset: int = 0) -> tuple[BinaryIO, int, int | None]:
    """``url``'s bytes from ``offset`` on when the other side can skip (else from 0):
    (the stream, where it starts, the whole file's size when known)."""
    parts = urlsplit(url)
    if parts.scheme == "file":
        path = Path(url2pathname(parts.path))
        try:
            handle = open_regular(path, "remote file")
        except FileNotFoundError:
            raise ZooError(f"{url}: no such file") from None
        except OSError as exc:
            raise ZooError(f"{url}: cannot read: {describe_os_error(exc)}") from None
        size = os.fstat(handle.fileno()).st_size
        start = offset if offset <= size else 0
        handle.seek(start)
        return handle, start, size
    if parts.scheme not in ("http", "https"):
        raise ZooError(f"{url}: unsupported scheme '{parts.scheme}'; http://, https:// or file://")
    headers = {"User-Agent": _user_agent(), "Accept-Encoding": "identity"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    wait = timeout()
    try:
        response = _opener.open(urllib.request.Request(url, headers=headers), timeout=wait)
    except urllib.error.HTTPError as exc:
        exc.close()
        if exc.code == 416 and offset:
            return open_url(url, 0)  # the partial file is no prefix of this one: start again
        if 300 <= exc.code < 400:
            raise ZooError(f"{url}: more than {MAX_REDIRECTS} redirects, or a redirect loop; refused") from None
        raise ZooError(f"{url}: HTTP {exc.code} {exc.reason}") from None
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, TimeoutError):
            raise ZooError(f"{url}: no answer within {wait:g} s (ZOO_HTTP_TIMEOUT)") from None
        raise ZooError(f"{url}: cannot connect: {exc.reason}") from None
    except (TimeoutError, http.client.HTTPException, ConnectionError) as exc:
        raise ZooError(
            f"{url}: no answer within {wait:g} s (ZOO_HTTP_TIMEOUT)"
            if isinstance(exc, TimeoutError)
            else f"{url}: the connection failed: {exc or type(exc).__name__}"
        ) from None
    length = response.headers.get("Content-Length")
    length = int(length) if length and length.isdigit() else None
    if response.status == 206:
        match = re.fullmatch(r"bytes (\d+)-(\d+)/(\d+)", response.headers.get("Content-Range", ""))
        if not match or int(match.group(1)) != offset:
            response.close()
            return open_url(url, 0)  # a range we did not ask for: take the whole file instead
        return response, offset, int(match.group(3))
    return response, 0, length


def fetch_bytes(url: str, limit: int = MAX_INDEX_BYTES) -> bytes:
    """The whole of a small file (an index); more than ``limit`` bytes is refused."""
    stream, _, size = open_url(url)
    with stream:
        if size is not None and size > limit:
            raise ZooError(f"{url}: {size:,} bytes, more than the {limit:,} an index may have; refused")
        try:
            data = stream.read(limit + 1)
        except (TimeoutError, OSError, http.client.HTTPException) as exc:
            raise ZooError(f"{url}: the transfer stopped: {exc or type(exc).__name__}") from None
    if len(data) > limit:
        raise ZooError(f"{url}: more than the {limit:,} bytes an index may have; refused")
    return data


def download(url: str, target: Path, size: int | None = None, sha256: str | None = None, label: str = "") -> bool:
    """Put ``url``'s bytes at ``target``; True when they were downloaded, False when
    ``target`` already held the expected ones (``sha256`` given: a cache by hash).

    With ``size`` and ``sha256`` (from an index) nothing else is accepted: more
    bytes than ``size`` stop the transfer, and a file whose hash differs is
    deleted and refused in one line."""
    limit = max_download()
    if size is not None and size > limit:
        raise ZooError(f"{url}: {size:,} bytes, more than ZOO_MAX_DOWNLOAD={limit:,}; refused")
    make_folder(target.parent)
    with exclusive_lock(target):  # two pulls of one archive: one downloads, the other finds it done
        if sha256 is not None and target.is_file() and sha256_file(target) == sha256:
            return False
        partial = target.with_name(target.name + ".part")
        for attempt in range(MAX_ATTEMPTS):
            before = partial.stat().st_size if partial.exists() else 0
            try:
                _transfer(url, partial, size if size is not None else limit, size is None, label)
                break
            except _Interrupted as exc:
                after = partial.stat().st_size if partial.exists() else 0
                if attempt == MAX_ATTEMPTS - 1 or after <= before:
                    raise ZooError(
                        f"{url}: the download stopped at {after:,} bytes ({exc}); run the command again to resume"
                    ) from None
        got = partial.stat().st_size
        if size is not None and got != size:
            partial.unlink()
            raise ZooError(f"{url}: the remote served {got:,} bytes, its index says {size:,}; nothing was installed")
        if sha256 is not None:
            actual = sha256_file(partial)
            if actual != sha256:
                partial.unlink()
                raise ZooError(
                    f"{url}: the remote served bytes that do not match its index "
                    f"(sha256 {actual[:12]}…, the index says {sha256[:12]}…); nothing was installed"
                )
        with open(partial, "rb+") as written:
            os.fsync(written.fileno())
        os.replace(partial, target)
    return True


def _transfer(url: str, partial: Path, limit: int, open_ended: bool, label: str) -> None:
    """Append ``url``'s bytes to ``partial`` from its current size on, never past ``limit``."""
    offset = partial.stat().st_size if partial.exists() else 0
    if offset > limit:
        partial.unlink()
        offset = 0
    if offset == limit and not open_ended:
        return  # complete already; the checks come next
    stream, start, total = open_url(url, offset)
    with stream:
        if total is not None and total > limit:
            raise ZooError(
                f"{url}: the remote offers {total:,} bytes, "
                + (f"more than ZOO_MAX_DOWNLOAD={limit:,}" if open_ended else f"its index says {limit:,}")
                + "; nothing was installed"
            )
        with open(partial, "ab" if start else "wb") as out, _progress(label or url, total or limit, start) as advance:
            received = start
            while True:
                try:
                    chunk = stream.read(CHUNK)
                except (TimeoutError, ConnectionError, http.client.HTTPException) as exc:
                    out.flush()
                    raise _Interrupted(str(exc) or type(exc).__name__) from None
                if not chunk:
                    break
                received += len(chunk)
                if received > limit:
                    out.truncate(0)  # a remote that lies about sizes gets no resumption
                    raise ZooError(
                        f"{url}: the remote sends more than "
                        + (f"ZOO_MAX_DOWNLOAD={limit:,}" if open_ended else f"the {limit:,} bytes its index says")
                        + " bytes; nothing was installed"
                    )
                out.write(chunk)
                advance(len(chunk))
        # Without a Content-Length a cut connection looks like the end: the index's size tells.
        end = total if total is not None else None if open_ended else limit
        if end is not None and received < end:
            raise _Interrupted(f"{received:,} of {end:,} bytes")


class _progress:
    """A rich progress bar on stderr when it is a terminal; silence otherwise."""

    def __init__(self, label: str, total: int, done: int):
        self.label, self.total, self.done = label, total, done
        self.bar: Progress | None = None

    def __enter__(self) -> Callable[[int], None]:
        if not sys.stderr.isatty():
            return lambda n: None

        bar = self.bar = Progress(
            TextColumn("{task.description}", markup=False),  # a file or variant name: data, not markup
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        bar.start()
        task = bar.add_task(self.label, total=self.total, completed=self.done)
        return lambda n: bar.advance(task, n)

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()
