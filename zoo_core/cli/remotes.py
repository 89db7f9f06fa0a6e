"""Remote catalogues: remote (add, list, remove, publish), pull."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..sharing import remotes
from .options import format_table, listing_actions


def remote_arguments(commands) -> None:
    p = commands.add_parser(
        "remote",
        help="add, list or remove the remote catalogues `zoo pull` reads; publish one into a folder",
        description="Remote catalogues: a `zoo serve` (http:// or https://) or a folder written by "
        "`zoo remote publish` (file://, e.g. a network drive). Bare `zoo remote` lists them.",
    )
    p.set_defaults(run=cmd_remote, remote_action="list")
    action = listing_actions(p, "remote_action", "list (the default), add, remove, publish")
    action("list", "list the remotes, in the order `zoo pull` looks through them")
    add = action("add", "add a remote: a `zoo serve` URL, a file:// URL or a folder written by `zoo remote publish`")
    add.add_argument("name", help="what to call it, e.g. 'team' (then `zoo pull team/VARIANT`)")
    add.add_argument("url", help="http://HOST:PORT, https://..., file:///FOLDER or a folder path")
    remove = action("remove", "forget a remote (what was pulled from it stays installed)")
    remove.add_argument("name", help="the remote (see `zoo remote list`)")
    publish = action("publish", "write a catalogue (index.json and archives/) into a folder others add as a remote")
    publish.add_argument("folder", type=Path, help="the folder to write, e.g. on a shared drive")
    publish.add_argument("names", nargs="*", help="the variants to offer (default: every one with weights)")


def cmd_remote(args) -> int:
    if args.remote_action == "add":
        remote = remotes.add_remote(args.name, args.url)
        print(f"added remote '{remote.name}' ({remote.url}); `zoo list --remote {remote.name}` shows what it offers")
    elif args.remote_action == "remove":
        remote = remotes.remove_remote(args.name)
        print(f"removed remote '{remote.name}' ({remote.url})")
    elif args.remote_action == "publish":
        from ..sharing.index import publish

        index = publish(args.folder, args.names or None)
        names = [entry["name"] for entry in index["variants"]]
        print(f"published {len(names)} variant{'s' * (len(names) != 1)} to {args.folder}: {', '.join(names)}")
        print(f"add it elsewhere with `zoo remote add NAME {args.folder.resolve().as_uri()}`")
    else:
        found = remotes.load_remotes()
        if args.json:
            print(json.dumps([{"name": r.name, "url": r.url} for r in found], indent=2))
        elif not found:
            print("no remotes; add one with `zoo remote add NAME URL`", file=sys.stderr)
        else:
            print(format_table(["name", "url"], [[r.name, r.url] for r in found]))
    return 0


def pull_arguments(commands) -> None:
    p = commands.add_parser(
        "pull",
        help="download a variant from a remote catalogue, verify it and add it to your catalogue",
        description="Download VARIANT's archive from REMOTE (default: the first remote offering it), resuming "
        "an interrupted download, check its size and sha256 against the remote's index, and install it into "
        "your catalogue. The archive is cached by its sha256: pulling it again downloads nothing. "
        "Timeouts: ZOO_HTTP_TIMEOUT (seconds); largest download: ZOO_MAX_DOWNLOAD.",
    )
    p.add_argument("variant", metavar="[REMOTE/]VARIANT", help="e.g. 'team/gpt-char-mini' or 'gpt-char-mini'")
    p.add_argument("--name", help="install it under this name instead (when the name is taken)")
    p.set_defaults(run=cmd_pull)


def cmd_pull(args) -> int:
    from ..sharing.pull import pull

    card, offer, downloaded = pull(args.variant, args.name)
    how = f"downloaded {offer.size:,} bytes" if downloaded else "archive already in the cache"
    print(f"pulled {offer.remote.name}/{offer.name} as '{card.name}' ({how}, sha256 {offer.sha256[:12]}…)")
    return 0
