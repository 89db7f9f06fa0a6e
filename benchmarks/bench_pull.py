"""Eight clients pulling the same variant at once from one `zoo serve`.

Starts a real `zoo serve` subprocess (its own user catalogue and cache), asks
for its index once (the archives are packed then, not during the timing), then
in each round starts CLIENTS `zoo pull` processes at the same moment, each with
its own ZOO_HOME and ZOO_CACHE (so each really downloads), and times the round
from the first start to the last exit. Every client's installed checkpoint is
checked against the source's sha256. For scale, each round is preceded by one
client pulling alone, and followed by CLIENTS processes that only download (the
same code, no install: no torch import, no tensor checks).

    OMP_NUM_THREADS=1 python -m benchmarks.bench_pull [--rounds 3] [--clients 8]

Writes its own section of docs/benchmarks.md (between markers; the rest of the
file is left alone).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import (
    BENCHMARKS_PAGE,
    load_text,
    machine_load,
    section_markers,
    spread,
    spread_text,
    write_section,
)
from tests.web_support import ZOO, Server

BEGIN, END = section_markers("bench_pull")
VARIANT = "gpt-char-mini"
DOWNLOAD_ONLY = (
    "import sys; from zoo_core.sharing.pull import fetch_archive, find_offer; "
    "path, downloaded = fetch_archive(find_offer(sys.argv[1])); assert downloaded; print(path)"
)


def client_environment(folder: Path) -> dict:
    """Another machine: its own catalogue and cache, and a built-in catalogue without
    the variant, so it installs under its own name and its weights stay byte for byte."""
    folder.mkdir(parents=True)
    (folder / "builtin.toml").write_text("")
    return {**os.environ, "ZOO_HOME": str(folder / "home"), "ZOO_CACHE": str(folder / "cache"),
            "ZOO_BUILTIN_REGISTRY": str(folder / "builtin.toml"), "OMP_NUM_THREADS": "1"}


def add_remote(folder: Path, url: str) -> dict:
    environment = client_environment(folder)
    subprocess.run([*ZOO, "remote", "add", "bench", url], env=environment, check=True, capture_output=True)
    return environment


def at_once(commands: list[tuple[list[str], dict]]) -> tuple[float, list[subprocess.CompletedProcess]]:
    """Start every command at the same moment; seconds until the last one exits."""
    started = time.perf_counter()
    processes = [subprocess.Popen(c, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c, e in commands]
    finished = []
    for process in processes:
        out, err = process.communicate(timeout=600)
        finished.append(subprocess.CompletedProcess(process.args, process.returncode, out, err))
    return time.perf_counter() - started, finished


def installed_sha256(folder: Path) -> str:
    return hashlib.sha256((folder / "home" / "checkpoints" / f"{VARIANT}.safetensors").read_bytes()).hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds (default: %(default)s)")
    parser.add_argument("--clients", type=int, default=8, help="clients pulling at once (default: %(default)s)")
    parser.add_argument("--no-write", action="store_true", help="print, do not touch docs/benchmarks.md")
    args = parser.parse_args()

    from zoo_core.loading.api import get_variant

    expected = get_variant(VARIANT).card.checkpoint.sha256
    load_before = machine_load()
    with tempfile.TemporaryDirectory(prefix="zoo-bench-pull-") as scratch:
        base = Path(scratch)
        os.environ["ZOO_HOME"], os.environ["ZOO_CACHE"] = str(base / "source-home"), str(base / "source-cache")
        server = Server()
        try:
            index = server.get_json("/catalogue/index.json")  # packs the archives before any timing
            size = next(e["archive"]["size"] for e in index["variants"] if e["name"] == VARIANT)
            alone, together, downloads, verified = [], [], [], 0
            for round_ in range(args.rounds):
                folder = base / f"alone-{round_}"
                seconds, (done,) = at_once([([*ZOO, "pull", f"bench/{VARIANT}"],
                                             add_remote(folder, server.url))])
                assert done.returncode == 0, done.stderr
                alone.append(seconds)

                folders = [base / f"round-{round_}-client-{i}" for i in range(args.clients)]
                commands = [([*ZOO, "pull", f"bench/{VARIANT}"], add_remote(f, server.url))
                            for f in folders]
                seconds, done = at_once(commands)
                failed = [d.stderr for d in done if d.returncode != 0]
                assert not failed, failed[0]
                assert all(installed_sha256(f) == expected for f in folders), "a client installed other weights"
                verified += len(folders)
                together.append(seconds)

                folders = [base / f"round-{round_}-download-{i}" for i in range(args.clients)]
                commands = [([sys.executable, "-c", DOWNLOAD_ONLY, f"bench/{VARIANT}"], add_remote(f, server.url))
                            for f in folders]
                seconds, done = at_once(commands)
                failed = [d.stderr for d in done if d.returncode != 0]
                assert not failed, failed[0]
                downloads.append(seconds)
        finally:
            server.stop()
    load_after = machine_load()

    megabytes = size / 1e6
    lines = [
        BEGIN,
        f"## Pulling from a remote: {args.clients} clients at once (`zoo pull`, loopback)",
        "",
        f"`python -m benchmarks.bench_pull` — one `zoo serve` offers `{VARIANT}` (a {size:,}-byte archive); "
        f"in each of {args.rounds} rounds {args.clients} `zoo pull` processes start at the same moment, each "
        "into its own ZOO_HOME and cache, and the round is timed from the first start to the last exit "
        "(download with the sha256 check, then install: archive checks, the tensors against the card). "
        f"{verified} of {verified} installed checkpoints matched the source's sha256. Machine load (1/5/15-minute "
        f"averages) {load_text(load_before)} before, {load_text(load_after)} after, on a machine with "
        f"{os.cpu_count()} cores shared with other jobs.",
        "",
        "| what | seconds, median (min–max) |",
        "|---|---:|",
        f"| one `zoo pull` alone | {spread_text(spread(alone), '.2f')} |",
        f"| {args.clients} `zoo pull` at once, until the last finished | {spread_text(spread(together), '.2f')} |",
        f"| {args.clients} downloads only at once (same download code, no install) | {spread_text(spread(downloads), '.2f')} |",
        "",
        f"The downloads alone moved {args.clients * megabytes:.1f} MB in {spread(downloads)['median']:.2f} s "
        "(including each process's start); the rest of a pull is each process's own start-up and checks, "
        "which on few cores queue behind one another.",
        END,
    ]
    section = "\n".join(lines)
    print(section)
    if args.no_write:
        return
    write_section("bench_pull", section)
    print(f"written to {BENCHMARKS_PAGE}")


if __name__ == "__main__":
    main()
