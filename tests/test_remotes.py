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
    many bytes; ``altered``: the archive's bytes are changed (same size)."""

    def __init__(self, archive: Path, name: str = SMALL):
        self.data = archive.read_bytes()
        self.requests: list[tuple[str, str | None]] = []
        self.cut_after: int | None = None
        self.altered = False
        self.padded = False  # more bytes than the index says
        card = archives.read_archive_card(archive).model_dump(mode="json", exclude_none=True)
        entry = {"path": f"archives/{name}.zoo", "size": len(self.data), "sha256": _sha256(self.data), "format": 1}
        self.index = json.dumps({"format": 1, "variants": [{"name": name, "card": card, "archive": entry}]}).encode()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                owner.requests.append((self.path, self.headers.get("Range")))
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

            def archive(self):
                data = bytearray(owner.data)
                if owner.altered:
                    data[len(data) // 2] ^= 0xFF
                if owner.padded:
                    data += b"\0" * 1000
                start = int(self.headers["Range"].removeprefix("bytes=").rstrip("-")) if self.headers["Range"] else 0
                body = bytes(data[start:])
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
