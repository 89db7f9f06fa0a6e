"""`zoo list` without importing the validation library: a cached, validated index.

Listing reads every registry file and validates each table into a card; on a
quiet machine importing pydantic was most of `zoo list`'s time. What validation
concludes depends only on the registry files' bytes and on the card schema, so
the rows it produced are kept in the user's cache folder under a key made of
the sha256 of every registry file (with its path and plugin) and of the schema
module. A file changed by one byte misses the cache and is validated again;
a catalogue that fails validation never enters the cache, so bad TOML or an
unknown field is refused exactly as without it.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from .plugin_manager import PluginSet, get_plugins

_FORMAT = 1  # bump when the rows' layout changes
_SCHEMA_FILES = ("cards.py", "registry.py", "listing.py", "cli.py")  # cli.py: what a row holds
# Files larger than this are never cached: the validating path refuses or reads them.
_HASH_LIMIT = 16 * 1024 * 1024


def cache_file() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "zoo" / "listing-index.json"


def catalogue_key(plugins: PluginSet) -> str | None:
    """A digest of everything validation depends on; None when a registry file
    cannot be hashed (missing, unreadable, huge), so the listing validates."""
    from .errors import ZooError
    from .files import read_limited

    digest = hashlib.sha256(f"zoo listing {_FORMAT}".encode())
    here = Path(__file__).resolve().parent
    for name in _SCHEMA_FILES:
        digest.update(hashlib.sha256((here / name).read_bytes()).digest())
    for path, plugin in plugins.variant_files:
        digest.update(f"\0{Path(path).resolve()}\0{plugin}\0".encode())
        try:
            digest.update(hashlib.sha256(read_limited(Path(path), _HASH_LIMIT, "registry file")).digest())
        except (OSError, ZooError):  # the validating path reports what is wrong
            return None
    return digest.hexdigest()


def listing_rows(summarise) -> list[dict]:
    """One row per variant (``summarise(card)`` plus the metrics the Markdown
    table needs), from the cache when the catalogue is unchanged."""
    plugins = get_plugins()
    key = catalogue_key(plugins)
    path = cache_file()
    try:
        cached = json.loads(path.read_text()) if key is not None else None
        if cached is not None and cached.get("key") == key:
            return cached["rows"]
    except (OSError, ValueError, AttributeError, KeyError):
        pass  # no cache, or an unreadable one: validate
    from .api import catalogue

    rows = [
        {**summarise(v.card), "train_loss": v.card.metrics.train_loss, "accuracy": v.card.metrics.accuracy}
        for v in catalogue(plugins)
    ]
    if key is not None:
        _store(path, {"key": key, "rows": rows})
    return rows


def _store(path: Path, document: dict) -> None:
    """Best effort: a read-only home folder only costs the next listing its speed."""
    try:
        from .files import atomic_write_text

        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(document))
    except OSError:
        pass
