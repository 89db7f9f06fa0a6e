"""The parsers of remote catalogues: remote (add, list, remove, publish), pull. Their handlers are in zoo_core/cli/remotes.py."""

from __future__ import annotations

from pathlib import Path

from .. import completers
from ..completers import complete_with
from .options import download_options, listing_actions


def remote_arguments(commands) -> None:
    p = commands.add_parser(
        "remote",
        help="add, list or remove the remote catalogues `zoo pull` reads; publish one into a folder",
        description="Remote catalogues: a `zoo serve` (http:// or https://) or a folder written by "
        "`zoo remote publish` (file://, e.g. a network drive). Bare `zoo remote` lists them.",
    )
    p.set_defaults(run="remotes:cmd_remote", remote_action="list")
    action = listing_actions(p, "remote_action", "list (the default), add, remove, publish")
    action("list", "list the remotes, in the order `zoo pull` looks through them")
    add = action("add", "add a remote: a `zoo serve` URL, a file:// URL or a folder written by `zoo remote publish`")
    add.add_argument("name", help="what to call it, e.g. 'team' (then `zoo pull team/VARIANT`)")
    add.add_argument("url", help="http://HOST:PORT, https://..., file:///FOLDER or a folder path")
    remove = action("remove", "forget a remote (what was pulled from it stays installed)")
    complete_with(remove.add_argument("name", help="the remote (see `zoo remote list`)"), completers.remote_names)
    publish = action("publish", "write a catalogue (index.json and archives/) into a folder others add as a remote")
    publish.add_argument("folder", type=Path, help="the folder to write, e.g. on a shared drive")
    names = publish.add_argument("names", nargs="*", help="the variants to offer (default: every one with weights)")
    complete_with(names, completers.variant_names)


def pull_arguments(commands) -> None:
    p = commands.add_parser(
        "pull",
        help="download a variant from a remote catalogue, verify it and add it to your catalogue",
        description="Download VARIANT's archive from REMOTE (default: the first remote offering it), resuming "
        "an interrupted download, check its size and sha256 against the remote's index, and install it into "
        "your catalogue. The archive is cached by its sha256: pulling it again downloads nothing. "
        "Timeouts: ZOO_HTTP_TIMEOUT (seconds, each wait), --deadline (the whole download) and --min-rate; "
        "largest download: ZOO_MAX_DOWNLOAD (docs/sharing.md).",
    )
    variant = p.add_argument("variant", metavar="[REMOTE/]VARIANT", help="e.g. 'team/gpt-char-mini' or 'gpt-char-mini'")
    complete_with(variant, completers.remote_prefixes)
    p.add_argument("--name", help="install it under this name instead (when the name is taken)")
    download_options(p)
    p.set_defaults(run="remotes:cmd_pull")
