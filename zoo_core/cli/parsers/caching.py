"""The parsers of the cache folder: cache clear. Their handlers are in zoo_core/cli/caching.py."""

from __future__ import annotations

from ...storage.cache_folder import CACHE_PARTS


def cache_arguments(commands) -> None:
    kept = ", ".join(part.folder for part in CACHE_PARTS if part.only_with_all)
    p = commands.add_parser(
        "cache",
        help="clear the zoo's cache folder (cards, plugins, gallery, served site...)",
        description="Everything in the cache folder is made again when needed: clearing it costs time, never data. "
        + " ".join(f"{part.folder}/: {part.holds}." for part in CACHE_PARTS),
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True, help="what to do: clear")
    clear = actions.add_parser(
        "clear",
        help=f"delete what the cache holds, but {kept}; and the staging folders killed installs left in $ZOO_HOME",
    )
    clear.add_argument("--all", action="store_true", help=f"also {kept}, and the cache folder itself once empty")
    p.set_defaults(run="caching:cmd_cache")
