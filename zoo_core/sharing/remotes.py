"""The remotes a user pulls from: ``$ZOO_HOME/remotes.toml``, in the order they were added.

::

    [remotes.team]
    url = "http://models.example:8000"

A remote is a `zoo serve` (``http://`` or ``https://``: its catalogue is at
``/catalogue/index.json``), or a folder written by `zoo remote publish`
(``file://``: ``index.json`` and ``archives/`` inside it). An ``http(s)`` URL
ending in ``.json`` names the index itself, e.g. a published folder behind a
plain web server.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from ..errors import ZooError, printable
from ..storage.files import atomic_write_text, exclusive_lock, read_limited, shared_lock
from ..storage.locations import zoo_home
from ..storage.toml_text import render_toml
from .urls import check_url

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
SCHEMES = ("http", "https", "file")
MAX_CONFIG_BYTES = 1 << 20


@dataclass(frozen=True)
class Remote:
    name: str
    url: str

    @property
    def index_url(self) -> str:
        """Where the remote's index is; its archives' paths are relative to it."""
        url = self.url.rstrip("/")
        if urlsplit(url).scheme == "file" or url.endswith(".json"):
            return url if url.endswith(".json") else url + "/index.json"
        return url + "/catalogue/index.json"


def remotes_path() -> Path:
    return zoo_home() / "remotes.toml"


def normalise_url(url: str) -> str:
    """The URL as stored, checked (`check_url`); a plain folder path becomes its ``file://`` URL."""
    if "://" not in url and not url.startswith("file:"):
        folder = Path(url).expanduser().resolve()
        if not folder.is_dir():
            raise ZooError(
                f"{printable(url)}: not a URL and not a folder; give http://, https:// or file:// (or a folder)"
            )
        url = folder.as_uri()
    parts = check_url(url, SCHEMES)
    if parts.scheme == "file" and (parts.netloc not in ("", "localhost") or not parts.path.startswith("/")):
        raise ZooError(
            f"{printable(url)}: a file:// URL names an absolute folder on this machine, e.g. file:///mnt/zoo"
        )
    return url


def load_remotes() -> list[Remote]:
    with shared_lock(remotes_path()):
        return _read()


def _read() -> list[Remote]:
    path = remotes_path()
    if not path.exists():
        return []
    try:
        table = tomllib.loads(read_limited(path, MAX_CONFIG_BYTES, "remotes file").decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ZooError(f"{path}: not valid TOML: {exc}") from None
    remotes = []
    entries = table.get("remotes", {})
    for name, entry in entries.items() if isinstance(entries, dict) else []:
        if not NAME.match(name) or not isinstance(entry, dict) or not isinstance(entry.get("url"), str):
            raise ZooError(f"{path}: remote '{printable(name)}' needs a plain name and a url = \"...\" string")
        remotes.append(Remote(name, entry["url"]))
    return remotes


def _render(remotes: list[Remote]) -> str:
    return render_toml(
        {"remotes": {remote.name: {"url": remote.url} for remote in remotes}},
        "The zoo's remotes, in the order `zoo pull` looks through them (`zoo remote add/remove`).",
    )


def _change(change) -> list[Remote]:
    """Read, change and write the remotes file under its lock: two commands at
    once both land, and a reader sees the old file or the new one."""
    path = remotes_path()
    with exclusive_lock(path):
        remotes = change(_read())  # the shared lock would wait for this one forever
        atomic_write_text(path, _render(remotes))
    return remotes


def add_remote(name: str, url: str) -> Remote:
    if not NAME.match(name):
        raise ZooError(f"'{printable(name)}': a remote's name is letters, digits, '.', '_' and '-' (at most 64)")
    remote = Remote(name, normalise_url(url))

    def add(remotes: list[Remote]) -> list[Remote]:
        for existing in remotes:
            if existing.name == name:
                raise ZooError(
                    f"remote '{name}' already exists ({printable(existing.url)}); `zoo remote remove {name}` first"
                )
        return [*remotes, remote]

    _change(add)
    return remote


def remove_remote(name: str) -> Remote:
    removed: list[Remote] = []

    def remove(remotes: list[Remote]) -> list[Remote]:
        removed.extend(r for r in remotes if r.name == name)
        if not removed:
            raise ZooError(f"no remote '{printable(name)}'; {_known(remotes)}")
        return [r for r in remotes if r.name != name]

    _change(remove)
    return removed[0]


def get_remote(name: str) -> Remote:
    remotes = load_remotes()
    for remote in remotes:
        if remote.name == name:
            return remote
    raise ZooError(f"no remote '{printable(name)}'; {_known(remotes)}")


def _known(remotes: list[Remote]) -> str:
    if not remotes:
        return "there are none yet: add one with `zoo remote add NAME URL`"
    return "the remotes are: " + ", ".join(r.name for r in remotes)
