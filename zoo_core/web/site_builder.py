"""The gallery `zoo serve` writes for itself, built while the server already answers.

Writing the gallery measures every variant (samples, attention maps, ...): many
seconds on a first start. The server does not wait for it: a thread of its own
builds the site while the API, /health and the sampling page answer; until the
first build is done the gallery's pages answer 503 with a page that says it is
being built (and reloads itself). When the catalogue changes (see
zoo_core.web.live_catalogue) the site is built again on that thread, the
measurements of unchanged variants coming from the cache; the pages already
written are served meanwhile.
"""

from __future__ import annotations

import html
import sys
import threading
import time
from pathlib import Path

from starlette.responses import HTMLResponse

from .gallery import write_gallery

BUILDING_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="3">
<title>Building the gallery — zoo</title><link rel="stylesheet" href="/static/zoo.css"></head>
<body><h1>The gallery is being built</h1>
<p>Every variant is measured once (its samples, attention maps, the bigram comparison); this page reloads
itself until the gallery is ready ({seconds:.0f} s so far). The <a href="/sample">sampling page</a> and the
API (<a href="/v1/models">/v1/models</a>, /v1/completions) answer already.</p></body></html>
"""

FAILED_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>No gallery — zoo</title>
<link rel="stylesheet" href="/static/zoo.css"></head>
<body><h1>The gallery could not be built</h1><p>{reason}</p>
<p>The <a href="/sample">sampling page</a> and the API answer; a change to the catalogue builds it again.</p></body></html>
"""


class SiteBuilder:
    """Builds the site into ``folder`` on its own thread: once at `start`, again after each `rebuild`."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.ready = False  # a whole site is in the folder
        self.state = "building"  # what /health says: building, ready, or failed: WHY
        self._wanted = threading.Event()
        self._started = time.monotonic()

    def start(self) -> None:
        self._wanted.set()
        threading.Thread(target=self._run, name="zoo-gallery", daemon=True).start()

    def rebuild(self) -> None:
        """Build again once the build under way (if any) ends; requests while one waits join it."""
        self._wanted.set()

    def building_page(self) -> HTMLResponse:
        """What the gallery's pages answer until the first build is done (or why it failed)."""
        if self.state.startswith("failed"):
            page = FAILED_PAGE.format(reason=html.escape(self.state.removeprefix("failed: ")))
        else:
            page = BUILDING_PAGE.format(seconds=time.monotonic() - self._started)
        return HTMLResponse(page, status_code=503, headers={"Retry-After": "3", "Cache-Control": "no-store"})

    def _run(self) -> None:
        while True:
            self._wanted.wait()
            self._wanted.clear()
            try:
                report = write_gallery(self.folder, quiet=True)
            except Exception as exc:  # plugin code measured: the server goes on without a gallery, saying why
                self.state = f"failed: {exc}"
                print(f"zoo serve: the gallery could not be built: {exc}", file=sys.stderr, flush=True)
                continue
            self.ready, self.state = True, "ready"
            print(
                f"zoo serve: gallery ready: {report['variants']} variants ({report['seconds']:.1f} s, "
                f"{report['cached']} from cache)",
                file=sys.stderr,
                flush=True,
            )
