"""The parsers of variants that travel: pack, install (one-file `.zoo` archives, zoo_core.sharing.archives). Their handlers are in zoo_core/cli/sharing.py."""

from __future__ import annotations

from pathlib import Path

from .. import completers
from ..completers import complete_with
from .options import download_options


def pack_arguments(commands) -> None:
    p = commands.add_parser("pack", help="write a variant as one .zoo archive another machine can install")
    p.add_argument("name", help="the variant to pack (see `zoo list`)")
    p.add_argument("--out", type=Path, default=None, help="the archive to write (default: ./NAME.zoo)")
    p.set_defaults(run="sharing:cmd_pack")


def install_arguments(commands) -> None:
    p = commands.add_parser("install", help="check a .zoo archive and add its variant to the user catalogue")
    archive = p.add_argument(
        "archive", help="the .zoo archive (written by `zoo pack`): a file, or an http(s):// or file:// URL"
    )
    complete_with(archive, completers.archives)
    p.add_argument("--name", default=None, help="install under this name instead of the archive's")
    download_options(p)
    p.set_defaults(run="sharing:cmd_install")
