"""Remote catalogues: remote (add, list, remove, publish), pull."""

from __future__ import annotations

import json
import sys

from ..errors import printable
from ..sharing import remotes
from ..sharing.index import publish
from ..sharing.pull import pull
from .tables import render_table


def cmd_remote(args) -> int:
    if args.remote_action == "add":
        remote = remotes.add_remote(args.name, args.url)
        print(
            f"added remote '{remote.name}' ({printable(remote.url)}); "
            f"`zoo list --remote {remote.name}` shows what it offers"
        )
    elif args.remote_action == "remove":
        remote = remotes.remove_remote(args.name)
        print(f"removed remote '{remote.name}' ({printable(remote.url)})")
    elif args.remote_action == "publish":
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
            print(render_table(["name", "url"], [[r.name, r.url] for r in found]))
    return 0


def cmd_pull(args) -> int:
    card, offer, downloaded = pull(args.variant, args.name)
    how = f"downloaded {offer.size:,} bytes" if downloaded else "archive already in the cache"
    print(f"pulled {offer.remote.name}/{printable(offer.name)} as '{card.name}' ({how}, sha256 {offer.sha256[:12]}…)")
    return 0
