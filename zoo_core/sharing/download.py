"""Fetching a remote's index and archives, bounded in every way a remote could abuse.

- time: every connect and every read waits at most ``ZOO_HTTP_TIMEOUT`` seconds;
  a whole download (its retries included) at most ``ZOO_DOWNLOAD_DEADLINE``
  seconds (`--deadline`), and it is abandoned when fewer than
  ``ZOO_DOWNLOAD_MIN_RATE`` bytes a second (`--min-rate`) arrive over
  ``RATE_WINDOW`` seconds: a server that drips bytes, headers included, is cut;
- size: an archive is read up to the size its index gives and no further, an
  index up to ``MAX_INDEX_BYTES``, anything at most ``ZOO_MAX_DOWNLOAD`` bytes;
- redirects: at most ``MAX_REDIRECTS``, to http(s) only; a range reply must be
  the range asked for; at most ``MAX_ATTEMPTS`` tries, each after progress;
- text: every URL, reason and name from the other side is shown through
  `printable` (one line, escaped, capped).

An archive downloads into ``NAME.part`` beside its target; a connection cut
part way resumes from the partial file's size with a ``Range`` request (also in
a later command: the partial file stays), and nothing becomes the target before
its size and sha256 match what was expected. ``file://`` URLs (a shared folder)
go through the same functions, reading the file instead of a response.
"""

from __future__ import annotations

import http.client
import io
import os
import re
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable
from urllib.parse import urljoin, urlsplit
from urllib.request import url2pathname

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

from ..catalogue.limits import parse_size
from ..errors import ZooError, printable
from ..storage.checkpoints import sha256_file
from ..storage.files import describe_os_error, exclusive_lock, make_folder, open_regular
from ..version import __version__
from .urls import HTTP_SCHEMES, check_url

MAX_REDIRECTS = 5
MAX_INDEX_BYTES = 64 << 20
MAX_ATTEMPTS = 4  # one download and up to three resumptions, each after progress was made
DEFAULT_TIMEOUT = 30.0
DEFAULT_DEADLINE = 3600.0  # a 16 GB archive needs 4.5 MB/s to fit: set ZOO_DOWNLOAD_DEADLINE for more
DEFAULT_MIN_RATE = 1024.0  # bytes per second: far below any working link, far above a drip
RATE_WINDOW = 10.0  # seconds the rate is averaged over: a TCP retransmission or two is no stall
DEFAULT_MAX_DOWNLOAD = "16G"
CHUNK = 1 << 16


def _number_setting(variable: str, default: float, what: str, low_inclusive: bool = False) -> float:
    text = os.environ.get(variable)
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1
    if not (0 <= value if low_inclusive else 0 < value) or not value < 1e12:
        raise ZooError(f"{variable} must be {what}, not {printable(text, 40)!r}")
    return value


def timeout() -> float:
    return _number_setting("ZOO_HTTP_TIMEOUT", DEFAULT_TIMEOUT, "a number of seconds")


def max_download() -> int:
    return parse_size(os.environ.get("ZOO_MAX_DOWNLOAD") or DEFAULT_MAX_DOWNLOAD, "ZOO_MAX_DOWNLOAD")


class _Pace:
    """How long one download (index or archive, its retries included) may take
    and how slowly it may go. While it is entered, a timer shuts every connection
    it opened once the deadline passes: a server dripping its headers is cut as
    surely as one dripping its body (http.client reads headers without a clock)."""

    _current = threading.local()

    def __init__(self, url: str):
        self.url = url
        self.deadline = _number_setting("ZOO_DOWNLOAD_DEADLINE", DEFAULT_DEADLINE, "a number of seconds")
        self.min_rate = _number_setting(
            "ZOO_DOWNLOAD_MIN_RATE", DEFAULT_MIN_RATE, "a number of bytes per second (0: no minimum)", True
        )
        self.started = self.window_start = time.monotonic()
        self.window_bytes = 0
        self.expired = False
        self.sockets: list[socket.socket] = []
        self.timer = threading.Timer(self.deadline, self._expire)
        self.timer.daemon = True

    def __enter__(self) -> _Pace:
        self.timer.start()
        _Pace._current.pace = self
        return self

    def __exit__(self, *exc) -> None:
        self.timer.cancel()
        _Pace._current.pace = None

    @classmethod
    def watch(cls, sock: socket.socket) -> None:
        pace = getattr(cls._current, "pace", None)
        if pace is not None:
            pace.sockets.append(sock)
            if pace.expired:
                pace._expire()

    def _expire(self) -> None:
        self.expired = True
        for sock in self.sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # the blocked read returns at once
            except OSError:
                pass  # closed already

    def remaining(self) -> float:
        return self.deadline - (time.monotonic() - self.started)

    def start_window(self, received: int) -> None:
        self.window_start, self.window_bytes = time.monotonic(), received

    def check(self, received: int) -> None:
        """Refuse in one line once the deadline has passed or the last window was too slow."""
        now = time.monotonic()
        if self.expired or now - self.started >= self.deadline:
            raise ZooError(
                f"{printable(self.url)}: not done within {self.deadline:g} s (--deadline, ZOO_DOWNLOAD_DEADLINE); "
                f"abandoned after {received:,} bytes"
            )
        elapsed = now - self.window_start
        if elapsed >= RATE_WINDOW:
            rate = (received - self.window_bytes) / elapsed
            if rate < self.min_rate:
                raise ZooError(
                    f"{printable(self.url)}: {rate:,.1f} bytes/s over the last {elapsed:.0f} s, less than "
                    f"{self.min_rate:,.0f} (--min-rate, ZOO_DOWNLOAD_MIN_RATE); abandoned after {received:,} bytes"
                )
            self.start_window(received)


class _WatchedHTTP(http.client.HTTPConnection):
    def connect(self) -> None:
        super().connect()
        _Pace.watch(self.sock)


class _WatchedHTTPS(http.client.HTTPSConnection):
    def connect(self) -> None:
        super().connect()
        _Pace.watch(self.sock)


class _HTTPHandler(urllib.request.HTTPHandler):
    def http_open(self, req):
        return self.do_open(_WatchedHTTP, req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def https_open(self, req):
        return self.do_open(_WatchedHTTPS, req, context=self._context)


class _BoundedRedirects(urllib.request.HTTPRedirectHandler):
    max_redirections = MAX_REDIRECTS
    max_repeats = 1  # the same URL twice is a loop

    def http_error_302(self, req, fp, code, msg, headers):
        # Checked before urllib's own check, whose refusal reads like a loop.
        target = headers.get("location") or headers.get("uri") or ""
        try:
            scheme = urlsplit(urljoin(req.full_url, target)).scheme
        except ValueError:
            scheme = "malformed"
        if target and scheme not in HTTP_SCHEMES:
            fp.close()
            raise ZooError(
                f"{printable(req.full_url)}: refused a redirect to a {printable(scheme, 20) or 'scheme-less'}: URL "
                f"({printable(target, 80)}); a remote may redirect to http(s) only"
            )
        return super().http_error_302(req, fp, code, msg, headers)

    http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302


_opener = urllib.request.build_opener(_HTTPHandler, _HTTPSHandler, _BoundedRedirects)


class _Interrupted(Exception):
    """The transfer stopped part way (cut connection, timeout): worth resuming."""


def _user_agent() -> str:
    return f"zoo/{__version__}"


def open_url(url: str, offset: int, pace: _Pace) -> tuple[io.BufferedIOBase, int, int | None]:
    """``url``'s bytes from ``offset`` on when the other side can skip (else from 0):
    (the stream, where it starts, the whole file's size when known). A range
    reply must be the range asked for; 416 (the partial file is no prefix of this
    one) asks once more for the whole file."""
    parts = check_url(url)
    if parts.scheme == "file":
        path = Path(url2pathname(parts.path))
        try:
            handle = open_regular(path, "remote file")
        except FileNotFoundError:
            raise ZooError(f"{printable(url)}: no such file") from None
        except OSError as exc:
            raise ZooError(f"{printable(url)}: cannot read: {describe_os_error(exc)}") from None
        size = os.fstat(handle.fileno()).st_size
        start = offset if offset <= size else 0
        handle.seek(start)
        return handle, start, size
    response = _request(url, offset, pace)
    if response is None:
        response = _request(url, 0, pace)
    if response is None:
        raise ZooError(f"{printable(url)}: HTTP 416 for the whole file; refused")
    length = response.headers.get("Content-Length")
    length = int(length) if length and length.isdigit() else None
    if response.status == 206:
        content_range = response.headers.get("Content-Range", "")
        match = re.fullmatch(r"bytes (\d+)-(\d+)/(\d+)", content_range)
        if not offset or not match or int(match.group(1)) != offset or int(match.group(2)) >= int(match.group(3)):
            response.close()
            asked = f"bytes {offset:,} on" if offset else "the whole file"
            raise ZooError(
                f"{printable(url)}: asked for {asked}, the server answered 206 with the range "
                f"{printable(content_range, 60)!r}; refused"
            )
        return response, offset, int(match.group(3))
    return response, 0, length


def _request(url: str, offset: int, pace: _Pace):
    """The response to a GET of ``url`` from ``offset``; None for a 416 to a range."""
    headers = {"User-Agent": _user_agent(), "Accept-Encoding": "identity"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    wait = min(timeout(), max(pace.remaining(), 0.001))
    shown = printable(url)
    try:
        return _opener.open(urllib.request.Request(url, headers=headers), timeout=wait)
    except urllib.error.HTTPError as exc:
        exc.close()
        if exc.code == 416 and offset:
            return None
        if 300 <= exc.code < 400:
            raise ZooError(f"{shown}: more than {MAX_REDIRECTS} redirects, or a redirect loop; refused") from None
        raise ZooError(f"{shown}: HTTP {exc.code} {printable(str(exc.reason), 80)}") from None
    except urllib.error.URLError as exc:
        pace.check(0)
        if isinstance(exc.reason, TimeoutError):
            raise ZooError(f"{shown}: no answer within {wait:g} s (ZOO_HTTP_TIMEOUT)") from None
        raise ZooError(f"{shown}: cannot connect: {printable(str(exc.reason), 120)}") from None
    except (TimeoutError, http.client.HTTPException, ConnectionError, ValueError) as exc:
        pace.check(0)  # the deadline's timer cut it: say so
        raise ZooError(
            f"{shown}: no answer within {wait:g} s (ZOO_HTTP_TIMEOUT)"
            if isinstance(exc, TimeoutError)
            else f"{shown}: the connection failed: {printable(str(exc), 120) or type(exc).__name__}"
        ) from None


def fetch_bytes(url: str, limit: int = MAX_INDEX_BYTES) -> bytes:
    """The whole of a small file (an index); more than ``limit`` bytes is refused."""
    with _Pace(url) as pace:
        stream, _, size = open_url(url, 0, pace)
        with stream:
            if size is not None and size > limit:
                raise ZooError(f"{printable(url)}: {size:,} bytes, more than the {limit:,} an index may have; refused")
            data = bytearray()
            pace.start_window(0)  # the rate counts from the headers on: a server may pack before it answers
            while len(data) <= limit:
                try:
                    chunk = stream.read1(CHUNK)
                except (TimeoutError, OSError, http.client.HTTPException) as exc:
                    pace.check(len(data))
                    raise ZooError(f"{printable(url)}: the transfer stopped: {exc or type(exc).__name__}") from None
                pace.check(len(data))
                if not chunk:
                    break
                data += chunk
    if len(data) > limit:
        raise ZooError(f"{printable(url)}: more than the {limit:,} bytes an index may have; refused")
    return bytes(data)


def download(url: str, target: Path, size: int | None = None, sha256: str | None = None, label: str = "") -> bool:
    """Put ``url``'s bytes at ``target``; True when they were downloaded, False when
    ``target`` already held the expected ones (``sha256`` given: a cache by hash).

    With ``size`` and ``sha256`` (from an index) nothing else is accepted: more
    bytes than ``size`` stop the transfer, and a file whose hash differs is
    deleted and refused in one line."""
    limit = max_download()
    shown = printable(url)
    if size is not None and size > limit:
        raise ZooError(f"{shown}: {size:,} bytes, more than ZOO_MAX_DOWNLOAD={limit:,}; refused")
    make_folder(target.parent)
    with exclusive_lock(target):  # two pulls of one archive: one downloads, the other finds it done
        if sha256 is not None and target.is_file() and sha256_file(target) == sha256:
            return False
        partial = target.with_name(target.name + ".part")
        with _Pace(url) as pace:
            for attempt in range(MAX_ATTEMPTS):  # a loop, bounded in tries and (by the pace) in time
                before = partial.stat().st_size if partial.exists() else 0
                try:
                    _transfer(url, partial, size if size is not None else limit, size is None, label, pace)
                    break
                except _Interrupted as exc:
                    after = partial.stat().st_size if partial.exists() else 0
                    pace.check(after)
                    if attempt == MAX_ATTEMPTS - 1 or after <= before:
                        raise ZooError(
                            f"{shown}: the download stopped at {after:,} bytes ({exc}); run the command again to resume"
                        ) from None
        got = partial.stat().st_size
        if size is not None and got != size:
            partial.unlink()
            raise ZooError(f"{shown}: the remote served {got:,} bytes, its index says {size:,}; nothing was installed")
        if sha256 is not None:
            actual = sha256_file(partial)
            if actual != sha256:
                partial.unlink()
                raise ZooError(
                    f"{shown}: the remote served bytes that do not match its index "
                    f"(sha256 {actual[:12]}…, the index says {sha256[:12]}…); nothing was installed"
                )
        with open(partial, "rb+") as written:
            os.fsync(written.fileno())
        os.replace(partial, target)
    return True


def _transfer(url: str, partial: Path, limit: int, open_ended: bool, label: str, pace: _Pace) -> None:
    """Append ``url``'s bytes to ``partial`` from its current size on, never past ``limit``."""
    shown = printable(url)
    offset = partial.stat().st_size if partial.exists() else 0
    if offset > limit:
        partial.unlink()
        offset = 0
    if offset == limit and not open_ended:
        return  # complete already; the checks come next
    stream, start, total = open_url(url, offset, pace)
    with stream:
        if total is not None and total > limit:
            raise ZooError(
                f"{shown}: the remote offers {total:,} bytes, "
                + (f"more than ZOO_MAX_DOWNLOAD={limit:,}" if open_ended else f"its index says {limit:,}")
                + "; nothing was installed"
            )
        pace.start_window(start)  # from the headers on, as in fetch_bytes
        with open(partial, "ab" if start else "wb") as out, _progress(label or url, total or limit, start) as advance:
            received = start
            while True:
                try:
                    # read1: whatever has arrived, so the pace is checked as bytes drip in
                    chunk = stream.read1(CHUNK)
                except (TimeoutError, ConnectionError, http.client.HTTPException) as exc:
                    raise _Interrupted(str(exc) or type(exc).__name__) from None
                pace.check(received)
                if not chunk:
                    break
                received += len(chunk)
                if received > limit:
                    out.truncate(0)  # a remote that lies about sizes gets no resumption
                    raise ZooError(
                        f"{shown}: the remote sends more than "
                        + (f"ZOO_MAX_DOWNLOAD={limit:,}" if open_ended else f"the {limit:,} bytes its index says")
                        + " bytes; nothing was installed"
                    )
                try:
                    out.write(chunk)
                    out.flush()  # kept for a resumption whatever comes next, and a full disk is seen here
                except OSError as exc:  # a full disk, a vanished folder: the command's one line
                    raise ZooError(
                        f"{partial}: cannot write the download: {describe_os_error(exc)}; nothing was installed"
                    ) from None
                advance(len(chunk))
        # Without a Content-Length a cut connection looks like the end: the index's size tells.
        end = total if total is not None else None if open_ended else limit
        if end is not None and received < end:
            raise _Interrupted(f"{received:,} of {end:,} bytes")


class _progress:
    """A rich progress bar on stderr when it is a terminal; silence otherwise."""

    def __init__(self, label: str, total: int, done: int):
        self.label, self.total, self.done = printable(label, 60), total, done
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
