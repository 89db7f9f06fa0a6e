"""Remote catalogues: `zoo serve` as the remote, `zoo remote`, `zoo list --remote`,
`zoo pull` (zoo_core.sharing).

The source machine is a real `zoo serve` subprocess on a loopback port; the
pulling machine is this process with a second ZOO_HOME. What a real server does
not do on demand (cut a download half way, serve altered bytes, redirect in a
loop, never answer) a small threaded HTTP server here does, recording every
request it sees.
"""

from __future__ import annotations

import hashlib
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="the remote tests serve with the web extra: pip install 'zoo-lm[web]'")

import zoo_core  # noqa: E402
from tests.web_support import SMALL, Server  # noqa: E402
from zoo_core.plugin_api.manager import get_plugins  # noqa: E402
from zoo_core.sharing import archives  # noqa: E402

PROMPT = ("--prompt", "ROMEO:", "--max-new-tokens", "24", "--seed", "7")


def _one_line_error(result, *fragments):
    assert result.code == 1, result.out
    assert result.err.startswith("zoo: error: ") and result.err.count("\n") == 1, result.err
    for fragment in fragments:
        assert fragment in result.err, result.err


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """The source machine: `zoo serve` with its own (empty) user catalogue and cache."""
    base = tmp_path_factory.mktemp("source")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ZOO_HOME", str(base / "home"))
        patch.setenv("ZOO_CACHE", str(base / "cache"))
        server = Server()
    yield server
    server.stop()


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    """``elsewhere()`` makes this process a second machine: its own ZOO_HOME and a
    built-in catalogue without the variant (so it installs under its own name)."""

    def move() -> None:
        empty = tmp_path / "elsewhere" / "registry.toml"
        empty.parent.mkdir()
        empty.write_text("")
        monkeypatch.setenv("ZOO_HOME", str(tmp_path / "elsewhere" / "home"))
        monkeypatch.setenv("ZOO_BUILTIN_REGISTRY", str(empty))
        get_plugins(reload=True)

    yield move
    monkeypatch.delenv("ZOO_BUILTIN_REGISTRY", raising=False)
    get_plugins(reload=True)


def _get(url: str, headers: dict | None = None):
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=60) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read()


# --- the real server as the remote ----------------------------------------------


def test_pull_from_zoo_serve_samples_as_the_source(zoo, source, elsewhere):
    original = zoo("sample", SMALL, *PROMPT)  # what the source machine's catalogue samples
    assert original.code == 0, original.err
    elsewhere()
    assert zoo("show", SMALL).code == 1  # not on this machine yet

    assert zoo("remote", "add", "src", source.url).code == 0
    listed = zoo("list", "--remote", "src", SMALL)
    assert listed.code == 0, listed.err
    assert SMALL in listed.out and "remote src" in listed.out
    remote_rows = json.loads(zoo("list", "--remote", "src", "--source", "remote", "--json").out)
    assert SMALL in {row["name"] for row in remote_rows} and "gpt-char" not in {r["name"] for r in remote_rows}

    pulled = zoo("pull", f"src/{SMALL}")
    assert pulled.code == 0, pulled.err
    assert "downloaded" in pulled.out
    assert zoo("sample", SMALL, *PROMPT).out == original.out
    origin = zoo_core.get_variant(SMALL).card.origin
    index = source.get_json("/catalogue/index.json")
    offered = next(entry["archive"] for entry in index["variants"] if entry["name"] == SMALL)
    assert origin.remote == "src" and origin.source == f"{source.url}/catalogue/archives/{SMALL}.zoo"
    assert origin.archive_sha256 == offered["sha256"]
    assert zoo("verify", SMALL).code == 0

    # Removed and pulled again (without naming the remote): the cached archive, no download.
    assert zoo("remove", SMALL).code == 0
    again = zoo("pull", SMALL)
    assert again.code == 0, again.err
    assert "already in the cache" in again.out
    assert zoo("sample", SMALL, *PROMPT).out == original.out


def test_the_served_archive_has_an_etag_ranges_and_304(source):
    index = source.get_json("/catalogue/index.json")
    assert index["format"] == 1
    entry = next(entry for entry in index["variants"] if entry["name"] == SMALL)
    assert entry["card"]["name"] == SMALL and entry["archive"]["format"] == archives.FORMAT
    assert "gpt-char" not in {e["name"] for e in index["variants"]}  # declared without weights: not offered
    url = f"{source.url}/catalogue/{entry['archive']['path']}"

    status, headers, whole = _get(url)
    assert status == 200 and len(whole) == entry["archive"]["size"] == int(headers["Content-Length"])
    assert _sha256(whole) == entry["archive"]["sha256"]
    assert headers["ETag"] == f'"{entry["archive"]["sha256"]}"' and headers["Accept-Ranges"] == "bytes"

    status, headers, tail = _get(url, {"Range": "bytes=1000-"})
    assert status == 206 and tail == whole[1000:]
    assert headers["Content-Range"] == f"bytes 1000-{len(whole) - 1}/{len(whole)}"
    assert _get(url, {"Range": f"bytes={len(whole)}-"})[0] == 416
    assert _get(url, {"If-None-Match": headers["ETag"]})[0] == 304
    assert _get(url, {"If-None-Match": '"0000"'})[0] == 200
    status, _, body = _get(f"{source.url}/catalogue/archives/no-such-variant.zoo")
    assert status == 404 and b"index.json" in body


# --- a small server that misbehaves on demand --------------------------------------


class Misbehaving:
    """Serves one archive as a zoo remote does, and records each request's path
    and Range header. ``cut_after``: the first archive response stops after that
    many bytes; ``altered``: the archive's bytes are changed (same size).
    Hostile modes: ``drip`` (seconds between the archive's bytes), ``slow_headers``
    (seconds between the bytes of every response's headers), ``wrong_range``
    (every archive reply is a 206 for bytes 0 on, asked for or not); ``index``
    may be replaced (escape codes, 300,000 names); ``/to-file.json`` and
    ``/to-data.json`` redirect to file: and data: URLs."""

    def __init__(self, archive: Path, name: str = SMALL):
        self.data = archive.read_bytes()
        self.requests: list[tuple[str, str | None]] = []
        self.cut_after: int | None = None
        self.altered = False
        self.padded = False  # more bytes than the index says
        self.drip: float | None = None
        self.slow_headers: float | None = None
        self.wrong_range = False
        card = archives.read_archive_card(archive).model_dump(mode="json", exclude_none=True)
        entry = {"path": f"archives/{name}.zoo", "size": len(self.data), "sha256": _sha256(self.data), "format": 1}
        self.index = json.dumps({"format": 1, "variants": [{"name": name, "card": card, "archive": entry}]}).encode()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                owner.requests.append((self.path, self.headers.get("Range")))
                if owner.slow_headers is not None:
                    return self.trickle(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\nX-Slow: " + b"x" * 10_000, owner.slow_headers)
                if self.path == "/to-file.json":
                    return self.redirect("file:///etc/passwd")
                if self.path == "/to-data.json":
                    return self.redirect("data:application/json,%7B%7D")
                if self.path == "/catalogue/index.json":
                    return self.reply(200, owner.index)
                if self.path == "/loop.json":
                    return self.redirect("/loop.json")
                if self.path.startswith("/chain/"):
                    return self.redirect(f"/chain/{int(self.path.split('/')[2].split('.')[0]) + 1}.json")
                if self.path == f"/catalogue/archives/{name}.zoo":
                    return self.archive()
                self.reply(404, b"{}")

            def redirect(self, where):
                self.send_response(302)
                self.send_header("Location", where)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def reply(self, status, body, extra=()):
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                for header in extra:
                    self.send_header(*header)
                self.end_headers()
                self.wfile.write(body)

            def trickle(self, data, seconds):
                """``data`` a byte at a time until the client hangs up (or a minute passes)."""
                ends = time.monotonic() + 60
                for byte in data:
                    if time.monotonic() > ends:
                        break
                    try:
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                    except OSError:
                        break  # the client gave up: what is under test
                    time.sleep(seconds)
                self.close_connection = True

            def archive(self):
                data = bytearray(owner.data)
                if owner.drip is not None:
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    return self.trickle(data, owner.drip)
                if owner.altered:
                    data[len(data) // 2] ^= 0xFF
                if owner.padded:
                    data += b"\0" * 1000
                start = int(self.headers["Range"].removeprefix("bytes=").rstrip("-")) if self.headers["Range"] else 0
                body = bytes(data[start:])
                if owner.wrong_range and not (owner.cut_after and not start):
                    whole = f"bytes 0-{len(data) - 1}/{len(data)}"
                    return self.reply(206, bytes(data), [("Content-Range", whole)])
                if start:
                    extra = [("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")]
                    return self.reply(206, body, extra)
                if owner.cut_after is not None:
                    cut, owner.cut_after = owner.cut_after, None
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body[:cut])
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)  # the connection drops half way
                    return
                self.reply(200, body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def archive_requests(self) -> list[str | None]:
        return [ranged for path, ranged in self.requests if path.endswith(".zoo")]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def misbehaving(tmp_path):
    server = Misbehaving(archives.pack_variant(SMALL, tmp_path / "small.zoo"))
    yield server
    server.close()


def _installed(name: str) -> bool:
    return zoo_core.loading.api.catalogue().find(name) is not None


def test_a_download_cut_half_way_resumes_with_a_range_request(zoo, misbehaving):
    half = len(misbehaving.data) // 2
    misbehaving.cut_after = half
    assert zoo("remote", "add", "flaky", misbehaving.url).code == 0
    pulled = zoo("pull", f"flaky/{SMALL}", "--name", "shared-small")
    assert pulled.code == 0, pulled.err
    assert misbehaving.archive_requests() == [None, f"bytes={half}-"]
    origin = zoo_core.get_variant("shared-small").card.origin
    assert origin.archive_sha256 == _sha256(misbehaving.data) and origin.remote == "flaky"

    # A second pull finds the archive in the cache: the server sees no archive request.
    assert zoo("remove", "shared-small").code == 0
    before = len(misbehaving.archive_requests())
    assert zoo("pull", SMALL, "--name", "shared-small").code == 0
    assert len(misbehaving.archive_requests()) == before


def test_bytes_not_matching_the_index_are_refused_and_nothing_installed(zoo, misbehaving, private_home):
    misbehaving.altered = True
    assert zoo("remote", "add", "liar", misbehaving.url).code == 0
    _one_line_error(zoo("pull", f"liar/{SMALL}", "--name", "shared-small"), "do not match its index", "nothing was installed")
    assert not _installed("shared-small")
    assert not list((private_home.parent / "cache" / "downloads").glob("*.zoo*"))  # nothing kept to resume


def test_more_bytes_than_the_index_says_are_refused(zoo, misbehaving, private_home):
    misbehaving.padded = True
    assert zoo("remote", "add", "big", misbehaving.url).code == 0
    _one_line_error(zoo("pull", f"big/{SMALL}", "--name", "padded"), "its index says", "nothing was installed")
    assert not _installed("padded")


def test_a_redirect_loop_or_chain_is_bounded(zoo, misbehaving):
    assert zoo("remote", "add", "loop", misbehaving.url + "/loop.json").code == 0
    assert zoo("remote", "add", "chain", misbehaving.url + "/chain/0.json").code == 0
    _one_line_error(zoo("list", "--remote", "loop"), "redirect")
    _one_line_error(zoo("pull", f"chain/{SMALL}"), "redirect")
    assert len([p for p, _ in misbehaving.requests if p.startswith("/chain/")]) <= 6


def test_a_server_that_never_answers_times_out(zoo, monkeypatch):
    silent = socket.socket()  # listens (so connecting succeeds) but never accepts or answers
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    try:
        monkeypatch.setenv("ZOO_HTTP_TIMEOUT", "0.5")
        assert zoo("remote", "add", "silent", f"http://127.0.0.1:{silent.getsockname()[1]}").code == 0
        started = time.monotonic()
        _one_line_error(zoo("pull", "silent/anything"), "no answer within 0.5 s", "ZOO_HTTP_TIMEOUT")
        assert time.monotonic() - started < 10
    finally:
        silent.close()


def test_unknown_remote_and_variant_name_what_exists(zoo, misbehaving):
    _one_line_error(zoo("pull", "nowhere/x"), "no remote 'nowhere'", "zoo remote add")
    assert zoo("remote", "add", "one", misbehaving.url).code == 0
    _one_line_error(zoo("pull", "one/nothing-like-it"), "no remote offers 'nothing-like-it'", SMALL)
    _one_line_error(zoo("remote", "add", "one", misbehaving.url), "already exists")
    _one_line_error(zoo("remote", "add", "ftp", "ftp://example.org/"), "unsupported scheme")
    assert zoo("remote", "remove", "one").code == 0
    _one_line_error(zoo("remote", "remove", "one"), "no remote 'one'")


# --- a shared folder (file://) through the same code ------------------------------


def test_a_published_folder_is_a_remote(zoo, tmp_path, private_home):
    folder = tmp_path / "shared-drive"
    published = zoo("remote", "publish", str(folder), SMALL)
    assert published.code == 0, published.err
    index = json.loads((folder / "index.json").read_text())
    assert [entry["name"] for entry in index["variants"]] == [SMALL]
    archive = folder / index["variants"][0]["archive"]["path"]
    assert _sha256(archive.read_bytes()) == index["variants"][0]["archive"]["sha256"]

    assert zoo("remote", "add", "drive", str(folder)).code == 0  # a folder path is taken as its file:// URL
    remotes = json.loads(zoo("remote", "list", "--json").out)
    assert remotes == [{"name": "drive", "url": folder.resolve().as_uri()}]
    assert "remote drive" in zoo("list", "--remote", "drive").out
    pulled = zoo("pull", f"drive/{SMALL}", "--name", "from-the-drive")
    assert pulled.code == 0, pulled.err
    assert zoo_core.get_variant("from-the-drive").card.origin.source == archive.resolve().as_uri()

    # Altered on the drive: refused like altered bytes from a server.
    data = bytearray(archive.read_bytes())
    data[len(data) // 2] ^= 0xFF
    archive.write_bytes(bytes(data))
    for cached in (private_home.parent / "cache" / "downloads").glob("*.zoo"):
        cached.unlink()
    _one_line_error(zoo("pull", f"drive/{SMALL}", "--name", "altered"), "do not match its index")
    assert not _installed("altered")


def test_zoo_install_takes_a_url(zoo, misbehaving):
    url = f"{misbehaving.url}/catalogue/archives/{SMALL}.zoo"
    result = zoo("install", url, "--name", "by-url")
    assert result.code == 0, result.err
    origin = zoo_core.get_variant("by-url").card.origin
    assert origin.source == url and origin.archive_sha256 == _sha256(misbehaving.data)


# --- hostile remotes: bounded in time, checked in what they answer, escaped when shown ---


def _snapshot(home: Path) -> dict[str, bytes]:
    """Every file under $ZOO_HOME and its bytes: what a refused command must leave as it was."""
    return {str(path.relative_to(home)): path.read_bytes() for path in sorted(home.rglob("*")) if path.is_file()}


def _refused_quickly(zoo, args, seconds, *fragments):
    started = time.monotonic()
    result = zoo(*args)
    _one_line_error(result, *fragments)
    assert time.monotonic() - started < seconds, result.err
    return result


def test_a_dripping_server_is_abandoned_at_the_deadline(zoo, misbehaving, private_home):
    misbehaving.drip = 0.2  # a byte every 0.2 s: every read is answered, so no per-read timeout fires
    assert zoo("remote", "add", "drip", misbehaving.url).code == 0
    before = _snapshot(private_home)
    _refused_quickly(
        zoo, ("pull", f"drip/{SMALL}", "--deadline", "1.5"), 8, "not done within 1.5 s", "--deadline", "abandoned after"
    )
    url = f"{misbehaving.url}/catalogue/archives/{SMALL}.zoo"
    _refused_quickly(zoo, ("install", url, "--deadline", "1", "--name", "dripped"), 8, "not done within 1 s")
    assert _snapshot(private_home) == before and not _installed("dripped")


def test_a_server_slower_than_the_minimum_rate_is_abandoned(zoo, misbehaving, private_home, monkeypatch):
    from zoo_core.sharing import download

    monkeypatch.setattr(download, "RATE_WINDOW", 0.5)  # the default averages over 10 s; the test over 0.5
    monkeypatch.setenv("ZOO_DOWNLOAD_MIN_RATE", "1000")  # the environment variable as well as the flag
    misbehaving.drip = 0.05  # 20 bytes/s
    assert zoo("remote", "add", "slow", misbehaving.url).code == 0
    before = _snapshot(private_home)
    _refused_quickly(zoo, ("pull", f"slow/{SMALL}"), 8, "bytes/s over the last", "less than 1,000", "ZOO_DOWNLOAD_MIN_RATE")
    assert _snapshot(private_home) == before


def test_a_server_sending_its_headers_slowly_is_abandoned(zoo, misbehaving, private_home, monkeypatch):
    misbehaving.slow_headers = 0.05
    monkeypatch.setenv("ZOO_DOWNLOAD_DEADLINE", "1")
    assert zoo("remote", "add", "slowhead", misbehaving.url).code == 0
    before = _snapshot(private_home)
    _refused_quickly(zoo, ("list", "--remote", "slowhead"), 8, "/catalogue/index.json: not done within 1 s")
    _refused_quickly(zoo, ("pull", f"slowhead/{SMALL}", "--deadline", "1"), 8, "not done within 1 s")
    assert _snapshot(private_home) == before


def test_a_range_reply_not_asked_for_is_refused_without_retrying(zoo, misbehaving, private_home):
    misbehaving.wrong_range = True  # every archive reply: 206, bytes 0 on
    assert zoo("remote", "add", "ranges", misbehaving.url).code == 0
    before = _snapshot(private_home)
    # The first request asks for the whole file and gets a 206 all the same.
    args = ("pull", f"ranges/{SMALL}", "--name", "ranged")
    _one_line_error(zoo(*args), "asked for the whole file, the server answered 206", "refused")
    assert misbehaving.archive_requests() == [None]
    # Cut half way, the resumption asks for bytes N on and gets bytes 0 on: refused, never asked again.
    half = misbehaving.cut_after = len(misbehaving.data) // 2
    _one_line_error(zoo(*args), f"asked for bytes {half:,} on", "'bytes 0-")
    assert misbehaving.archive_requests() == [None, None, f"bytes={half}-"]
    assert _snapshot(private_home) == before and not _installed("ranged")


@pytest.mark.parametrize(("path", "scheme"), [("/to-file.json", "file"), ("/to-data.json", "data")])
def test_a_redirect_to_another_scheme_says_what_was_refused(zoo, misbehaving, path, scheme):
    assert zoo("remote", "add", "away", misbehaving.url + path).code == 0
    result = zoo("list", "--remote", "away")
    _one_line_error(result, f"refused a redirect to a {scheme}: URL", "http(s) only")
    assert "loop" not in result.err


ESCAPES = "\x1b[2J\x1b]0;owned\x07\nzoo: ok\r\x00"


def test_names_and_text_from_a_remote_are_escaped_on_one_line(zoo, misbehaving):
    index = json.loads(misbehaving.index)
    entry = index["variants"][0]
    entry["card"]["description"] = "a fine model" + ESCAPES
    hostile = {**entry, "name": "evil" + ESCAPES}
    misbehaving.index = json.dumps({**index, "variants": [entry, hostile]}).encode()
    assert zoo("remote", "add", "esc", misbehaving.url).code == 0
    result = zoo("pull", "esc/nothing-like-it")
    _one_line_error(result, "no remote offers 'nothing-like-it'", "evil\\u001b[2J\\u001b]0;owned\\u0007\\nzoo: ok\\r\\u0000")
    listed = zoo("list", "--remote", "esc", SMALL)
    assert listed.code == 0, listed.err
    assert not any(c in listed.out + result.err for c in "\x1b\x07\r\x00") and "\nzoo: ok" not in listed.out


def test_an_index_of_300000_names_gives_a_short_line_with_a_count(zoo, misbehaving):
    archive = {"path": "archives/x.zoo", "size": 1, "sha256": "0" * 64, "format": 1}
    variants = [{"name": f"v{i}", "card": {}, "archive": archive} for i in range(300_000)]
    misbehaving.index = json.dumps({"format": 1, "variants": variants}).encode()
    assert zoo("remote", "add", "huge", misbehaving.url).code == 0
    result = zoo("pull", "huge/absent")
    _one_line_error(result, "huge offers v0, v1", "and 299,990 more")
    assert len(result.err) < 500, len(result.err)


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("http://[::1", "not a valid URL (Invalid IPv6 URL)"),
        ("http://example.org/\nzoo: ok", "printable ASCII without spaces"),
        ("http://example.org/a b", "printable ASCII without spaces"),
        ("http://exa\x1b[2Jmple.org/", "printable ASCII without spaces"),
        ("http://example.org:99999/", "not a valid URL (Port out of range"),
        ("http:///catalogue", "no host in the URL"),
        ("gopher://example.org/", "unsupported scheme 'gopher'"),
    ],
)
def test_remote_add_refuses_a_bad_url_in_one_line(zoo, private_home, url, fragment):
    result = zoo("remote", "add", "bad", url)
    _one_line_error(result, fragment)
    assert "\x1b" not in result.err
    assert not (private_home / "remotes.toml").exists()


def test_remote_list_escapes_a_hand_edited_url(zoo, private_home):
    private_home.mkdir(parents=True)
    (private_home / "remotes.toml").write_text('[remotes.forged]\nurl = "http://a.example/\\nzoo: ok \\u001b[2J"\n')
    listed = zoo("remote", "list")
    assert listed.code == 0, listed.err
    assert "http://a.example/\\nzoo: ok \\u001b[2J" in listed.out
    assert "\x1b" not in listed.out and len(listed.out.strip().splitlines()) == 3  # header, rule, one row


def test_a_full_disk_during_a_pull_is_one_line_and_installs_nothing(zoo, misbehaving, private_home):
    assert zoo("remote", "add", "full", misbehaving.url).code == 0
    before = _snapshot(private_home)
    downloads = private_home.parent / "cache" / "downloads"
    downloads.mkdir(parents=True)
    # /dev/full: every write fails with ENOSPC, from the kernel itself.
    (downloads / f"{_sha256(misbehaving.data)}.zoo.part").symlink_to("/dev/full")
    _one_line_error(zoo("pull", f"full/{SMALL}"), "cannot write the download: No space left on device")
    assert _snapshot(private_home) == before and not _installed(SMALL + "-x")


def test_an_unwritable_cache_during_a_pull_is_one_line(zoo, misbehaving, private_home, monkeypatch):
    assert zoo("remote", "add", "ro", misbehaving.url).code == 0
    before = _snapshot(private_home)
    monkeypatch.setenv("ZOO_CACHE", "/sys/zoo-cache")  # nobody, root included, may create anything in /sys
    result = zoo("pull", f"ro/{SMALL}", "--name", "not-here")
    _one_line_error(result, "/sys/zoo-cache", "cannot write here")
    assert _snapshot(private_home) == before and not _installed("not-here")


def test_the_slow_link_command_of_docs_sharing_md(zoo, misbehaving, elsewhere):
    line = next(line for line in (Path(zoo_core.__file__).parents[1] / "docs" / "sharing.md").read_text().splitlines()
                if line.startswith("zoo pull team/") and "--deadline" in line)
    elsewhere()
    assert zoo("remote", "add", "team", misbehaving.url).code == 0
    pulled = zoo(*line.partition("#")[0].split()[1:])
    assert pulled.code == 0, pulled.err
    assert zoo_core.get_variant(SMALL).card.origin.remote == "team"
