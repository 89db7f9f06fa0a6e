"""Shared by the web tests: a real `zoo serve` subprocess on a free loopback port,
`zoo sample` run as a user runs it, and where screenshots go."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ZOO = [sys.executable, "-m", "zoo_core.cli"]
SMALL = "transformer-1b-learned-ctx8"  # fast to load and sample


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`zoo serve` as a subprocess; stopped (by its own pid) when the test ends."""

    def __init__(self, *arguments: str, environment: dict[str, str] | None = None, gallery: bool = False):
        """``environment``: variables set for the server besides this process's; ``gallery``:
        let it build its own gallery (by default the API tests go without)."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        environment = {**os.environ, **(environment or {}), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
        self.log = tempfile.TemporaryFile()
        if "--site" not in arguments and not gallery:
            arguments = ("--no-gallery", *arguments)  # the API tests need no gallery built
        self.process = subprocess.Popen([*ZOO, "serve", "--port", str(self.port), *arguments],
                                        stdout=self.log, stderr=subprocess.STDOUT, env=environment)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"zoo serve exited {self.process.returncode}: {self.output()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2):
                    return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"zoo serve did not answer within 120 s: {self.output()}")

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()

    def get_json(self, path: str) -> dict:
        with urllib.request.urlopen(self.url + path, timeout=60) as response:
            return json.loads(response.read())


def zoo_sample(name: str, prompt: str, max_new_tokens: int, seed: int, temperature: float = 1.0,
               top_k: int | None = None, min_p: float | None = None) -> str:
    """What a user sees from `zoo sample` (its trailing newline is print's)."""
    command = [*ZOO, "sample", name, "--prompt", prompt, "--max-new-tokens", str(max_new_tokens),
               "--seed", str(seed), "--temperature", str(temperature)]
    if top_k is not None:
        command += ["--top-k", str(top_k)]
    if min_p is not None:
        command += ["--min-p", str(min_p)]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout.removesuffix("\n")


def artifacts_folder() -> Path:
    """Screenshots go to $ZOO_TEST_ARTIFACTS (CI keeps it) or a fresh temporary folder."""
    folder = Path(os.environ.get("ZOO_TEST_ARTIFACTS") or tempfile.mkdtemp(prefix="zoo-web-artifacts-"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder
