"""Cards validated once: a registry file's cards, and a checkpoint header's, kept as JSON.

Validating a card needs pydantic, and importing pydantic and defining the card
models costs more than everything else `zoo list` does, and more than `zoo load`
spends outside torch. Registry files and checkpoints change rarely, so what
validation found is kept in the user's cache folder (``$ZOO_CACHE/cards``) and
read back, without pydantic, for as long as the file and the card schema are the
same:

- a registry file: every table as given (validated again only when a caller
  asks for the pydantic card) and its ``CardFacts`` (`zoo_core.catalogue.card_facts`);
- a checkpoint: the weight-defining fields of the card in its header, which
  every load compares with the registry's.

An entry's key is the sha256 of what was validated (the file's bytes, the
header's text) and of the schema: the source of the modules that decide what a
valid card is and what an entry holds, and the zoo's and pydantic's versions.
Anything else about an entry (unreadable, truncated, edited, of another format
or key) makes it a miss: the file is validated with pydantic exactly as without
a cache, same errors, and the entry rewritten. Only valid files are cached.
There is one entry per file, named after its absolute path, so editing a
registry replaces its entry rather than adding one. Writing is best effort: a
cache folder that cannot be written means validating every time, never an error.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .card_facts import CardFacts, is_plain_json

# What decides whether a card is valid and what it validates to, and what an entry holds.
_SCHEMA_MODULES = ("cards.py", "limits.py", "registry.py", "card_facts.py", "card_cache.py")


@dataclass(frozen=True)
class CachedCard:
    table: dict[str, Any]  # the registry table, its name included: what ModelCard.model_validate is given
    facts: CardFacts


@functools.cache
def schema_fingerprint() -> bytes | None:
    """Changes whenever a card could validate differently; None (no caching) when
    the zoo's sources cannot be read to tell."""
    from ..version import __version__

    digest = hashlib.sha256(f"zoo {__version__}; pydantic {_pydantic_version()}\0".encode())
    here = Path(__file__).resolve().parent
    try:
        for name in _SCHEMA_MODULES:
            digest.update((here / name).read_bytes() + b"\0")
    except OSError:
        return None
    return digest.digest()


def _pydantic_version() -> str:
    """pydantic's version without importing pydantic or importlib.metadata (either
    costs more than everything else `zoo list` does with a warm cache): the name
    of the ``pydantic-<version>.dist-info`` folder that installers write beside
    the package. importlib.metadata only where there is no such folder."""
    import importlib.util

    spec = importlib.util.find_spec("pydantic")
    for package in (spec.submodule_search_locations or []) if spec else []:
        for dist_info in sorted(Path(package).parent.glob("pydantic-[0-9]*.dist-info")):
            return dist_info.name.removeprefix("pydantic-").removesuffix(".dist-info")
    return _pydantic_version_from_metadata()


def _pydantic_version_from_metadata() -> str:
    """Read from pydantic's metadata, which does not import pydantic and (unlike
    ``importlib.metadata.version``) stops at the version instead of parsing its
    140 KB METADATA as e-mail."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        text = distribution("pydantic").read_text("METADATA") or ""
    except (PackageNotFoundError, OSError):
        return "unknown"
    for line in text.splitlines():
        if line.startswith("Version:"):
            return line.partition(":")[2].strip()
        if not line:  # the end of the headers
            break
    return "unknown"


def _key(kind: str, content: bytes) -> str | None:
    fingerprint = schema_fingerprint()
    if fingerprint is None:
        return None
    return hashlib.sha256(fingerprint + kind.encode() + b"\0" + content).hexdigest()


def _entry_path(path: Path) -> Path:
    from ..storage.files import cache_file_for

    return cache_file_for(path, "cards", ".json")


def _read(path: Path, key: str | None) -> Any | None:
    """The payload stored for ``path`` under ``key``; None on any kind of miss."""
    from ..storage.files import read_cache_entry

    return None if key is None else read_cache_entry(_entry_path(path), key)


def _write(path: Path, key: str | None, payload: Any) -> None:
    """Store ``payload`` for ``path``; any failure leaves the cache as it was."""
    from ..storage.files import write_cache_entry

    if key is not None:
        write_cache_entry(_entry_path(path), key, payload)


# -- registry files ----------------------------------------------------------------


def cached_cards(path: Path, data: bytes) -> list[CachedCard] | None:
    """The cards of the registry file ``path`` whose bytes are ``data``, as last
    validated; None when they must be validated."""
    payload = _read(path, _key("registry", data))
    if payload is None:  # a miss
        return None
    try:
        return [CachedCard(card["table"], CardFacts.from_json(card)) for card in payload]
    except (TypeError, KeyError):  # an entry not shaped as this module writes them
        return None


def cache_cards(path: Path, data: bytes, cards: list[CachedCard]) -> None:
    """Keep the cards validated from ``data``. A table holding what JSON cannot
    carry unchanged (a TOML date) is not cached: it would read back different."""
    payload = [{"table": card.table, **card.facts.to_json()} for card in cards]
    if is_plain_json(payload):
        _write(path, _key("registry", data), payload)


# -- checkpoint headers ------------------------------------------------------------


def cached_header_fields(path: Path, text: str) -> dict[str, Any] | None:
    """The weight fields of the (valid) card ``text`` in the header of the
    checkpoint ``path``, as last validated; None when it must be validated."""
    fields = _read(path, _key("header", text.encode("utf-8", "surrogatepass")))
    return fields if isinstance(fields, dict) else None


def cache_header_fields(path: Path, text: str, fields: dict[str, Any]) -> None:
    if is_plain_json(fields):
        _write(path, _key("header", text.encode("utf-8", "surrogatepass")), fields)
