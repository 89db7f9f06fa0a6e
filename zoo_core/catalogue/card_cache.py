"""Cards validated once: a registry file's cards, and a checkpoint header's, kept as JSON.

Validating a card needs pydantic, and importing pydantic and defining the card
models costs more than everything else `zoo list` does. Registry files and
checkpoints change rarely, so what validation found is kept in the user's cache
folder (``$ZOO_CACHE/cards``) and read back, without pydantic, for as long as
the file and the card schema are the same:

- a registry file: every table as given (validated again only when a caller
  asks for the pydantic card) and the card's index entry
  (``ModelCard.index_entry``), which `zoo list`, `search` and completion read;
- a checkpoint: the weight-defining fields of the card in its header, which
  every load compares with the registry's.

An entry's key is the sha256 of what was validated (the file's bytes, the
header's text) and of the zoo's version and ``CARD_SCHEMA_VERSION``.
Anything else about an entry (unreadable, truncated, edited, of another format
or key) makes it a miss: the file is validated with pydantic exactly as without
a cache, same errors, and the entry rewritten. Only valid files are cached.
There is one entry per file, named after its absolute path, so editing a
registry replaces its entry rather than adding one. Writing is best effort: a
cache folder that cannot be written means validating every time, never an error.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..storage.files import cache_file_for, read_cache_entry, write_cache_entry
from ..version import __version__

# Bump this whenever a card could validate differently or an entry would hold
# something else: a field, default, limit or validator of `cards.py` or
# `limits.py` changed, a built-in plugin's config model changed, or what
# ``ModelCard.index_entry``, ``weight_fields`` or this module store. The zoo's version alone does not change between commits,
# and an entry made by the old code would otherwise be served as if valid.
CARD_SCHEMA_VERSION = 3


@dataclass(frozen=True)
class CachedCard:
    table: dict[str, Any]  # the registry table, its name included: what ModelCard.model_validate is given
    entry: dict[str, Any]  # ModelCard.index_entry() of the card it validated to: what the front reads


def is_plain_json(value: Any) -> bool:
    """Only what JSON carries unchanged (TOML dates and times do not): such data
    can be cached and read back as the very same values."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return True
    if isinstance(value, list):
        return all(is_plain_json(item) for item in value)
    if isinstance(value, dict):
        return all(isinstance(key, str) and is_plain_json(item) for key, item in value.items())
    return False


def _key(kind: str, content: bytes) -> str:
    schema = f"zoo {__version__}; card schema {CARD_SCHEMA_VERSION}"
    return hashlib.sha256(f"{schema}\0{kind}\0".encode() + content).hexdigest()


def _entry_path(path: Path) -> Path:
    return cache_file_for(path, "cards", ".json")


def _read(path: Path, key: str) -> Any | None:
    """The payload stored for ``path`` under ``key``; None on any kind of miss."""
    return read_cache_entry(_entry_path(path), key)


def _write(path: Path, key: str, payload: Any) -> None:
    """Store ``payload`` for ``path``; any failure leaves the cache as it was."""
    write_cache_entry(_entry_path(path), key, payload)


# -- registry files ----------------------------------------------------------------


def cached_cards(path: Path, data: bytes) -> list[CachedCard] | None:
    """The cards of the registry file ``path`` whose bytes are ``data``, as last
    validated; None when they must be validated."""
    payload = _read(path, _key("registry", data))
    if payload is None:  # a miss
        return None
    try:
        return [CachedCard(card["table"], card["entry"]) for card in payload]
    except (TypeError, KeyError):  # an entry not shaped as this module writes them
        return None


def cache_cards(path: Path, data: bytes, cards: list[CachedCard]) -> None:
    """Keep the cards validated from ``data``. A table holding what JSON cannot
    carry unchanged (a TOML date) is not cached: it would read back different."""
    payload = [{"table": card.table, "entry": card.entry} for card in cards]
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
