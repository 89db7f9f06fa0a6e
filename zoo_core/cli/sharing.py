"""Variants that travel: pack, install (one-file `.zoo` archives, zoo_core.sharing.archives)."""

from __future__ import annotations

from pathlib import Path

from ..sharing.archives import archive_manifest, install_archive, pack_variant
from ..sharing.pull import fetch_url
from ..storage.checkpoints import sha256_file
from ..storage.locations import zoo_home


def cmd_pack(args) -> int:
    written = pack_variant(args.name, args.out)
    manifest = archive_manifest(written)
    plugins = sorted({f"{p['distribution']} {p['version']}".strip() for p in manifest["plugins"]})
    print(f"{args.name} -> {written} ({written.stat().st_size:,} bytes, sha256 {sha256_file(written)[:16]}…)")
    print(f"  holds {', '.join(m['name'] for m in manifest['members'])}; needs {', '.join(plugins) or 'no plugins'}")
    if "base" in manifest:
        print(f"  an adapter: installing it needs its base '{manifest['base']['name']}' in the catalogue")
    return 0


def cmd_install(args) -> int:
    origin = None
    if args.archive.partition("://")[0] in ("http", "https", "file"):
        # The download is bounded (time, size, redirects); the archive's own checks follow.
        path, origin = fetch_url(args.archive), {"source": args.archive}
    else:
        path = Path(args.archive)
    card = install_archive(path, args.name, origin=origin)
    print(f"{card.name}: installed from {args.archive} -> {zoo_home() / card.checkpoint.path}")
    print(f"  checked: member sizes and sha256, card, plugins, weights against the card; try: zoo sample {card.name}")
    return 0
