"""The catalogue a machine offers to others: an index of its variants and one
archive per variant.

`zoo serve` answers it over HTTP (``/catalogue/index.json``,
``/catalogue/archives/NAME.zoo``) and `zoo remote publish` writes the same two
things into a folder (a ``file://`` remote): both are built here, so a client
reads one format whichever way it comes.

Archives are packed once and kept in the cache folder under a key made of the
variant's name, its checkpoint's sha256 and its card: a retrained (or
re-described) variant gets a fresh archive, an unchanged one is never packed again.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from functools import partial
from pathlib import Path

from ..errors import ZooError
from ..loading.api import catalogue, get_variant, has_published_weights
from ..storage.checkpoints import sha256_file
from ..storage.files import atomic_write, atomic_write_text, exclusive_lock, make_folder
from ..storage.locations import cache_dir
from .archives import archive_manifest, pack_variant

INDEX_FORMAT = 1  # bumped when a field of the index changes meaning
ARCHIVES = "archives"  # the archives' folder, relative to the index


def archive_file_name(name: str) -> str:
    return f"{name}.zoo"


def _archive_key(variant) -> str:
    """What decides an archive's bytes: the name, the weights and the card."""
    weights = variant.card.checkpoint.sha256 or sha256_file(variant.checkpoint_path)
    card = json.dumps(variant.card.model_dump(mode="json", exclude_none=True), sort_keys=True)
    return hashlib.sha256(f"{variant.name}\n{weights}\n{card}".encode()).hexdigest()[:32]


def cached_archive(variant) -> Path:
    """The variant's archive in the cache folder, packed now if it is not there yet.
    Packing happens under a lock, so two requests at once pack it once."""
    target = cache_dir() / "archives" / f"{variant.name}-{_archive_key(variant)}.zoo"
    if target.is_file():
        return target
    make_folder(target.parent)
    with exclusive_lock(target):
        if not target.is_file():
            pack_variant(variant.name, out=target)  # atomic: a reader never sees half an archive
    return target


def build_index(names: list[str] | None = None, warn: bool = False) -> tuple[dict, dict[str, Path]]:
    """The index of ``names`` (default: every variant with published weights) and
    where each one's archive lies. A named variant without weights is an error;
    unnamed ones without weights are simply not offered, nor (with ``warn``, a
    warning line each) those that cannot be packed: one broken variant does not
    take the whole catalogue down."""
    if names:
        variants = [get_variant(name) for name in names]
        for variant in variants:
            if not has_published_weights(variant):
                raise ZooError(f"'{variant.name}' has no published weights: there is nothing to share")
    else:
        variants = [v for v in catalogue() if has_published_weights(v)]
    entries, archives = [], {}
    for variant in variants:
        try:
            path = cached_archive(variant)
            manifest = archive_manifest(path)
        except ZooError as exc:
            if not warn:
                raise
            print(f"zoo: warning: not offering '{variant.name}': {exc}", file=sys.stderr)
            continue
        entries.append(
            {
                "name": variant.name,
                "card": variant.card.model_dump(mode="json", exclude_none=True),
                "archive": {
                    "path": f"{ARCHIVES}/{archive_file_name(variant.name)}",
                    "size": path.stat().st_size,
                    "sha256": sha256_file(path),
                    "format": manifest.get("format"),
                },
            }
        )
        archives[variant.name] = path
    return {"format": INDEX_FORMAT, "variants": entries}, archives


def publish(folder: Path, names: list[str] | None = None) -> dict:
    """Write the index and the archives into ``folder``: a catalogue others reach
    as a ``file://`` remote (a shared or network drive). The archives go first and
    the index last, so a reader never finds an index naming an archive not yet there."""
    index, archives = build_index(names)
    for name, path in archives.items():
        target = folder / ARCHIVES / archive_file_name(name)
        atomic_write(target, partial(shutil.copyfile, path))
    atomic_write_text(folder / "index.json", json.dumps(index, indent=1, sort_keys=True) + "\n")
    return index
