"""Variants that travel: pack, install (one-file `.zoo` archives, zoo_core.sharing.archives)."""

from __future__ import annotations

from pathlib import Path

from ..storage.locations import zoo_home


def pack_arguments(commands) -> None:
    p = commands.add_parser("pack", help="write a variant as one .zoo archive another machine can install")
    p.add_argument("name", help="the variant to pack (see `zoo list`)")
    p.add_argument("--out", type=Path, default=None, help="the archive to write (default: ./NAME.zoo)")
    p.set_defaults(run=cmd_pack)


def cmd_pack(args) -> int:
    from ..sharing.archives import archive_manifest, pack_variant
    from ..storage.checkpoints import sha256_file

    written = pack_variant(args.name, args.out)
    manifest = archive_manifest(written)
    plugins = sorted({f"{p['distribution']} {p['version']}".strip() for p in manifest["plugins"]})
    print(f"{args.name} -> {written} ({written.stat().st_size:,} bytes, sha256 {sha256_file(written)[:16]}…)")
    print(f"  holds {', '.join(m['name'] for m in manifest['members'])}; needs {', '.join(plugins) or 'no plugins'}")
    if "base" in manifest:
        print(f"  an adapter: installing it needs its base '{manifest['base']['name']}' in the catalogue")
    return 0


def install_arguments(commands) -> None:
    p = commands.add_parser("install", help="check a .zoo archive and add its variant to the user catalogue")
    p.add_argument("archive", help="the .zoo archive (written by `zoo pack`): a file, or an http(s):// or file:// URL")
    p.add_argument("--name", default=None, help="install under this name instead of the archive's")
    p.set_defaults(run=cmd_install)


def cmd_install(args) -> int:
    from ..sharing.archives import install_archive

    origin = None
    if args.archive.partition("://")[0] in ("http", "https", "file"):
        from ..sharing.pull import fetch_url

        # The download is bounded (time, size, redirects); the archive's own checks follow.
        path, origin = fetch_url(args.archive), {"source": args.archive}
    else:
        path = Path(args.archive)
    card = install_archive(path, args.name, origin=origin)
    print(f"{card.name}: installed from {args.archive} -> {zoo_home() / card.checkpoint.path}")
    print(f"  checked: member sizes and sha256, card, plugins, weights against the card; try: zoo sample {card.name}")
    return 0
