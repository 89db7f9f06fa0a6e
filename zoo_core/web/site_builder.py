"""The gallery `zoo serve` writes for itself, built while the server already answers.

Writing the gallery measures every variant (samples, attention maps, ...): many
seconds on a first start, a minute more for an imported model of a hundred
million parameters. The server does not wait for it, nor share its cores with it:
the site is built by a child process (``python -m zoo_core.web.site_builder``)
at the lowest CPU priority (``os.nice(19)``) and on one torch thread, so that the
API, /health and the sampling page answer at their usual speed while it runs; it
reports each page written on its standard output, and until the first build is
done the gallery's pages answer 503 with a page that says how far it has come
(and reloads itself). When the catalogue changes (see
zoo_core.web.live_catalogue) the site is built again the same way, the
measurements of unchanged variants coming from the cache; the pages already
written are served meanwhile. The child ends with the server (it watches its
parent), and a build under way when the server stops is ended.
"""

from __future__ import annotations

import atexit
import html
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch
from starlette.responses import HTMLResponse

from ..errors import ZooError
from .gallery import write_gallery

BUILDING_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="3">
<title>Building the gallery — zoo</title><link rel="stylesheet" href="/static/zoo.css"></head>
<body><h1>The gallery is being built</h1>
<p>Every variant is measured once (its samples, attention maps, the bigram comparison); this page reloads
itself until the gallery is ready ({seconds:.0f} s so far).</p>
<p id="progress">{progress}</p>
<p>The <a href="/sample">sampling page</a> and the
API (<a href="/v1/models">/v1/models</a>, /v1/completions) answer already.</p></body></html>
"""

FAILED_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>No gallery — zoo</title>
<link rel="stylesheet" href="/static/zoo.css"></head>
<body><h1>The gallery could not be built</h1><p>{reason}</p>
<p>The <a href="/sample">sampling page</a> and the API answer; a change to the catalogue builds it again.</p></body></html>
"""


class SiteBuilder:
    """Builds the site into ``folder`` in a child process: once at `start`, again after each `rebuild`."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.ready = False  # a whole site is in the folder
        self.state = "building"  # what /health says: building, ready, or failed: WHY
        self.written = 0  # the build under way: pages written so far, of `total`
        self.total: int | None = None
        self.current: str | None = None  # the variant being measured
        self._wanted = threading.Event()
        self._started = time.monotonic()
        self._child: subprocess.Popen | None = None

    def start(self) -> None:
        self._wanted.set()
        threading.Thread(target=self._run, name="zoo-gallery", daemon=True).start()
        atexit.register(self.stop)

    def rebuild(self) -> None:
        """Build again once the build under way (if any) ends; requests while one waits join it."""
        self._wanted.set()

    def stop(self) -> None:
        """End a build under way (the server is stopping)."""
        child = self._child
        if child is not None and child.poll() is None:
            child.terminate()
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()

    def progress(self) -> str:
        """How far the build under way has come, in words."""
        if self.total is None:
            return "Starting the build ..."
        measuring = f"; measuring {self.current}" if self.current else ""
        return f"{self.written} of {self.total} variant pages written{measuring}."

    def building_page(self) -> HTMLResponse:
        """What the gallery's pages answer until the first build is done (or why it failed)."""
        if self.state.startswith("failed"):
            page = FAILED_PAGE.format(reason=html.escape(self.state.removeprefix("failed: ")))
        else:
            page = BUILDING_PAGE.format(seconds=time.monotonic() - self._started, progress=html.escape(self.progress()))
        return HTMLResponse(page, status_code=503, headers={"Retry-After": "3", "Cache-Control": "no-store"})

    def _run(self) -> None:
        while True:
            self._wanted.wait()
            self._wanted.clear()
            report, failure = self._build()
            if report is None or failure is not None:
                self.state = f"failed: {failure}"
                print(f"zoo serve: the gallery could not be built: {failure}", file=sys.stderr, flush=True)
                continue
            self.ready, self.state = True, "ready"
            print(
                f"zoo serve: gallery ready: {report['variants']} variants ({report['seconds']:.1f} s, "
                f"{report['cached']} from cache)",
                file=sys.stderr,
                flush=True,
            )

    def _build(self) -> tuple[dict | None, str | None]:
        """One build in a child process: (its report, None) or (None, why it failed)."""
        self.written, self.total, self.current = 0, None, None
        environment = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        try:
            self._child = child = subprocess.Popen(
                [sys.executable, "-m", "zoo_core.web.site_builder", str(self.folder), str(os.getpid())],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
                text=True,
                env=environment,
            )
        except OSError as exc:
            return None, f"cannot start the build: {exc}"
        errors: list[str] = []
        stdout, stderr = child.stdout, child.stderr
        assert stdout is not None and stderr is not None  # both piped above
        drain = threading.Thread(target=lambda: errors.extend(stderr), daemon=True)  # never a full pipe
        drain.start()
        report, failure = None, None
        for line in stdout:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if "total" in message:
                self.total = message["total"]
            if "measuring" in message:
                self.current = message["measuring"]
            if "written" in message:
                self.written, self.current = message["written"], None
            report, failure = message.get("report", report), message.get("failed", failure)
        child.wait()
        drain.join(timeout=5)
        if report is None and failure is None:
            last = "".join(errors).strip().splitlines()
            failure = f"the build ended with status {child.returncode}" + (f": {last[-1]}" if last else "")
        return report, failure


def _watch_parent(parent: int) -> None:
    """End this build when the server that started it is gone."""
    while True:
        time.sleep(1)
        if os.getppid() != parent:
            os._exit(0)


def _say(message: dict) -> None:
    print(json.dumps(message), flush=True)


def main(argv: list[str]) -> int:
    """The child: write the gallery into argv[0] at the lowest priority, saying each step on stdout."""
    folder, parent = Path(argv[0]), int(argv[1])
    try:
        os.nice(19)  # the server's requests come first
    except (AttributeError, OSError):
        pass  # a system without nice: the single thread still leaves the other cores alone
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    torch.set_num_threads(1)
    try:
        report = write_gallery(folder, quiet=True, on_progress=_say)
    except ZooError as exc:
        _say({"failed": str(exc)})
        return 1
    except Exception as exc:  # plugin code measured: the server goes on without a gallery, saying why
        _say({"failed": f"{type(exc).__name__}: {exc}"})
        return 1
    _say({"report": report})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
