"""`zoo pull [REMOTE/]VARIANT`: find the variant in a remote's index, download its
archive (cached by the index's sha256: pulling it again downloads nothing), then
install it with the archive's own checks, recording where it came from."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urljoin

from pydantic import ValidationError

from ..catalogue.cards import ModelCard
from ..catalogue.registry import Variant
from ..errors import ZooError, printable, shown_list
from ..storage.locations import cache_dir, zoo_home
from ..storage.staging import remove_leftover_staging
from .archives import archive_manifest, install_archive
from .download import download, fetch_bytes
from .index import INDEX_FORMAT
from .remotes import Remote, get_remote, load_remotes

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_ARCHIVE_PATH = re.compile(r"^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$")  # relative, no scheme, no '..'


@dataclass(frozen=True)
class Offer:
    """One variant a remote offers, as its index describes it."""

    remote: Remote
    name: str
    card: dict
    index_url: str
    path: str  # the archive's, relative to the index
    size: int
    sha256: str

    @property
    def url(self) -> str:
        # Joined when used, not for every entry: an index may list 300,000 names.
        return urljoin(self.index_url, self.path)


def remote_offers(remote: Remote) -> list[Offer]:
    """What ``remote`` offers, its index checked in shape before anything is believed."""
    url = remote.index_url
    try:
        index = json.loads(fetch_bytes(url))
    except (ValueError, RecursionError):
        raise ZooError(f"remote '{remote.name}': {printable(url)} is not JSON; is this a zoo catalogue?") from None
    if not isinstance(index, dict) or not isinstance(index.get("variants"), list):
        raise ZooError(f"remote '{remote.name}': {printable(url)} is not a zoo catalogue index")
    if index.get("format") != INDEX_FORMAT:
        raise ZooError(
            f"remote '{remote.name}': index format {printable(repr(index.get('format')), 40)}, "
            f"this zoo reads {INDEX_FORMAT}; upgrade the older side"
        )
    offers = []
    for entry in index["variants"]:
        archive = entry.get("archive") if isinstance(entry, dict) else None
        if not (
            isinstance(archive, dict)
            and isinstance(entry.get("name"), str)
            and isinstance(entry.get("card"), dict)
            and isinstance(archive.get("size"), int)
            and archive["size"] >= 0
            and isinstance(archive.get("sha256"), str)
            and _SHA256.match(archive["sha256"])
            and isinstance(archive.get("path"), str)
            and _ARCHIVE_PATH.match(archive["path"])
            and ".." not in archive["path"].split("/")
        ):
            raise ZooError(
                f"remote '{remote.name}': {printable(url)} has a malformed entry: {printable(json.dumps(entry), 120)}"
            )
        offers.append(
            Offer(remote, entry["name"], entry["card"], url, archive["path"], archive["size"], archive["sha256"])
        )
    return offers


def find_offer(spec: str) -> Offer:
    """``[REMOTE/]VARIANT``: in that remote, or the first remote (in order) offering it."""
    remote_name, _, name = spec.rpartition("/")
    remotes = [get_remote(remote_name)] if remote_name else load_remotes()
    if not remotes:
        raise ZooError("there are no remotes to pull from: add one with `zoo remote add NAME URL`")
    seen = []
    for remote in remotes:
        offers = remote_offers(remote)
        for offer in offers:
            if offer.name == name:
                return offer
        # The names come from another machine: escaped, and a few of them with a count.
        seen.append(f"{remote.name} offers {shown_list([o.name for o in offers]) or 'nothing'}")
    raise ZooError(f"no remote offers '{printable(name)}': " + "; ".join(seen))


def downloads_folder() -> Path:
    return cache_dir() / "downloads"


def fetch_archive(offer: Offer) -> tuple[Path, bool]:
    """The offer's archive in the cache (downloaded now unless already there) and
    whether it was downloaded."""
    target = downloads_folder() / f"{offer.sha256}.zoo"
    downloaded = download(offer.url, target, offer.size, offer.sha256, label=f"{offer.remote.name}/{offer.name}")
    return target, downloaded


def pull(spec: str, new_name: str | None = None):
    """Download (or find cached) and install; returns (the installed card, the offer, downloaded?).
    The staging folders of installs and pulls that were killed are removed first."""
    remove_leftover_staging(zoo_home())
    offer = find_offer(spec)
    path, downloaded = fetch_archive(offer)
    held = archive_manifest(path).get("variant")
    if held != offer.name:  # the hash matched the index, but the index put another variant under this name
        raise ZooError(
            f"{printable(offer.url)}: the archive holds '{printable(str(held))}', "
            f"not '{printable(offer.name)}' as the index says; refused"
        )
    card = install_archive(path, new_name, origin={"source": offer.url, "remote": offer.remote.name})
    return card, offer, downloaded


def fetch_url(url: str) -> Path:
    """An archive named by URL alone (`zoo install URL`): no index vouches for it,
    so it is downloaded afresh each time, bounded by ZOO_MAX_DOWNLOAD, and the
    archive's own manifest is all that is checked."""
    target = downloads_folder() / f"url-{hashlib.sha256(url.encode()).hexdigest()[:32]}.zoo"
    download(url, target)
    return target


def offered_variants(remote: Remote) -> list:
    """The remote's offers as catalogue variants (layer ``remote NAME``), so `zoo list`
    filters and prints them like local ones. Their cards are validated here: a card
    this zoo cannot read is one line naming it."""
    variants = []
    for offer in remote_offers(remote):
        try:
            card = ModelCard.model_validate(offer.card)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            raise ZooError(
                f"remote '{remote.name}': the card of '{printable(offer.name)}' is invalid "
                f"({printable(where, 80)}: {printable(first['msg'], 120)})"
            ) from None
        variants.append(Variant(card, Path(offer.url), "remote", f"remote {remote.name}"))
    return variants
