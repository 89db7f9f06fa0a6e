"""The zoo in a browser: gallery, serve."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ..errors import ZooError


def gallery_arguments(commands) -> None:
    p = commands.add_parser("gallery", help="write a static site of every variant and study (opens from file://)")
    p.add_argument("--out", type=Path, default=Path("site"), help="output folder (default: %(default)s)")
    p.add_argument("--variants", metavar="PATTERN", help="only variants matching this shell wildcard (default: all)")
    p.add_argument(
        "--cache", type=Path, help="where per-variant samples and maps are cached (default: the user cache folder)"
    )
    p.add_argument("--quiet", action="store_true", help="no per-variant progress lines")
    p.set_defaults(run=cmd_gallery)


def cmd_gallery(args) -> int:
    from ..web.gallery import write_gallery

    report = write_gallery(args.out, pattern=args.variants, cache=args.cache, quiet=args.quiet)
    print(
        f"{report['variants']} variants, {report['studies']} studies -> {args.out / 'index.html'} "
        f"({report['seconds']:.1f} s, {report['cached']} from cache)"
    )
    return 0


def serve_arguments(commands) -> None:
    p = commands.add_parser("serve", help="serve the gallery, a sampling page and an OpenAI-style completions API")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s, this machine only)")
    p.add_argument("--port", type=int, default=8000, help="port (default: %(default)s)")
    p.add_argument(
        "--site",
        type=Path,
        help="a folder written by `zoo gallery` to serve at / (default: write the gallery into the user cache folder)",
    )
    p.add_argument(
        "--no-gallery", action="store_true", help="serve only the sampling page and the API (/ goes to /sample)"
    )
    p.add_argument(
        "--max-tokens-limit",
        type=int,
        default=1024,
        metavar="N",
        help="largest max_tokens a request may ask for (default: %(default)s)",
    )
    p.add_argument(
        "--max-concurrent",
        type=int,
        default=4,
        metavar="N",
        help="rows one variant's running batch decodes together; more wait (default: %(default)s)",
    )
    p.add_argument(
        "--max-queue",
        type=int,
        default=64,
        metavar="N",
        help="rows that may wait for a place in a batch; more get HTTP 429 (default: %(default)s)",
    )
    safety = p.add_argument_group("network safety (docs/serving.md)")
    safety.add_argument(
        "--api-key",
        default=os.environ.get("ZOO_API_KEY"),
        metavar="KEY",
        help="bearer token /v1/* and /metrics require; needed to bind beyond loopback "
        "(default: $ZOO_API_KEY, which, unlike this flag, other users' `ps` does not show)",
    )
    safety.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a Host name to answer besides localhost and IP addresses (repeatable; '*': any)",
    )
    safety.add_argument(
        "--cors-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="a web origin (https://app.example) whose pages may call the API (repeatable)",
    )
    safety.add_argument(
        "--header-timeout",
        type=float,
        default=10.0,
        metavar="S",
        help="seconds a request's headers may take (default: %(default)s)",
    )
    safety.add_argument(
        "--body-timeout",
        type=float,
        default=30.0,
        metavar="S",
        help="seconds a request's body may take after its headers (default: %(default)s)",
    )
    safety.add_argument(
        "--keep-alive-timeout",
        type=int,
        default=5,
        metavar="S",
        help="seconds an idle connection stays open between requests (default: %(default)s)",
    )
    safety.add_argument(
        "--max-connections",
        type=int,
        default=1000,
        metavar="N",
        help="open connections at once; more are closed on arrival (default: %(default)s)",
    )
    p.set_defaults(run=cmd_serve)


def cmd_serve(args) -> int:
    from ..web.connections import ConnectionLimits
    from ..web.security import Security, check_bind
    from ..web.server import Limits, serve

    if not 0 <= args.port <= 65535:  # before the gallery is written, not after
        raise ZooError(f"--port must be from 0 to 65535, not {args.port}")
    if args.max_tokens_limit < 1 or args.max_concurrent < 1:
        raise ZooError("--max-tokens-limit and --max-concurrent must be at least 1")
    if args.max_queue < 0:
        raise ZooError("--max-queue must be 0 or more")
    if min(args.header_timeout, args.body_timeout, args.keep_alive_timeout, args.max_connections) <= 0:
        raise ZooError("--header-timeout, --body-timeout, --keep-alive-timeout and --max-connections must be positive")
    check_bind(args.host, args.api_key)  # before the gallery is written: refusing should be instant
    limits = Limits(
        max_tokens=args.max_tokens_limit,
        max_concurrent_generations=args.max_concurrent,
        max_queued_generations=args.max_queue,
    )
    security = Security(tuple(args.allowed_host), tuple(args.cors_origin), args.api_key or None)
    connections = ConnectionLimits(
        args.header_timeout, args.body_timeout, args.keep_alive_timeout, args.max_connections
    )
    site = args.site
    if site is None and not args.no_gallery:
        from ..web.gallery import served_site_folder, write_gallery

        # Measurements are cached per checkpoint: only the first start pays for them.
        site = served_site_folder()
        print(f"zoo serve: writing the gallery to {site} ...", file=sys.stderr, flush=True)
        write_gallery(site, quiet=True)
    serve(args.host, args.port, site, limits, security, connections)
    return 0
