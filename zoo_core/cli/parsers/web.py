"""The parsers of the zoo in a browser: gallery, serve. Their handlers are in zoo_core/cli/web.py."""

from __future__ import annotations

import os
from pathlib import Path

from .options import quantize_option


def gallery_arguments(commands) -> None:
    p = commands.add_parser("gallery", help="write a static site of every variant and study (opens from file://)")
    p.add_argument("--out", type=Path, default=Path("site"), help="output folder (default: %(default)s)")
    p.add_argument("--variants", metavar="PATTERN", help="only variants matching this shell wildcard (default: all)")
    p.add_argument(
        "--cache", type=Path, help="where per-variant samples and maps are cached (default: the user cache folder)"
    )
    p.add_argument(
        "--results",
        type=Path,
        metavar="DIR",
        help="show each CSV of DIR as a sortable table on the index (default: the checkout's results/)",
    )
    p.add_argument("--quiet", action="store_true", help="no per-variant progress lines")
    p.set_defaults(run="web:cmd_gallery")


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
    p.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error"),
        default="info",
        help="info: a line per request (method, path, status, duration) on stderr; warning, error: problems only; "
        "debug: uvicorn's own messages too (default: %(default)s)",
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
    quantize_option(p)
    p.set_defaults(run="web:cmd_serve")
