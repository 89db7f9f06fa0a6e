"""The zoo in a browser: gallery, serve."""

from __future__ import annotations

from ..errors import ZooError

try:
    from ..web.connections import ConnectionLimits
    from ..web.gallery import served_site_folder, write_gallery
    from ..web.security import Security, check_bind
    from ..web.server import Limits, serve
except ImportError as exc:  # the web extra's packages (uvicorn, starlette...) are imported at these modules' tops
    raise ZooError(
        f"zoo gallery and zoo serve need the web extra (missing: {exc.name}): pip install 'zoo-lm[web]'"
    ) from None


def cmd_gallery(args) -> int:
    report = write_gallery(args.out, pattern=args.variants, cache=args.cache, quiet=args.quiet, results=args.results)
    print(
        f"{report['variants']} variants, {report['studies']} studies, {report['results']} results tables "
        f"-> {args.out / 'index.html'} "
        f"({report['seconds']:.1f} s, {report['cached']} from cache)"
    )
    return 0


def cmd_serve(args) -> int:
    # Its numbers (--port, --max-tokens-limit...) were checked before it ran (zoo_core/cli/bounds.py).
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
    site, build_site = args.site, args.site is None and not args.no_gallery
    if build_site:  # written while the server answers; measurements cached per checkpoint
        site = served_site_folder()
    serve(args.host, args.port, site, limits, security, connections, build_site, args.log_level, args.quantize)
    return 0
