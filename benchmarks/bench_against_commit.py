"""`zoo list` and `zoo --help` as fresh processes: this checkout against an earlier commit.

    .venv/bin/python -m benchmarks.bench_against_commit e3c2032 [--rounds 15]

Restructuring the core must not make the commands people run most slower. The
earlier commit is checked out into a temporary git worktree, and each side runs
as ``python -m zoo_core.cli`` with a folder on ``PYTHONPATH`` that links
``zoo_core`` and ``zoo_plugins`` to that side's own sources (the editable
install's finder comes after the path, so each side imports its own code; the
entry points are the same names on both) and its own cache folder. The sides alternate, in an order that
reverses every round, after one warm-up run each (bytecode and card caches warm,
as for anyone who has run the zoo before). The ratio is taken round by round,
so both sides of a ratio ran back to back on this shared machine.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import ROOT, load_text, machine_load, median_interval, spread, spread_text, write_section

COMMANDS = {"zoo list": ["list"], "zoo --help": ["--help"]}
_ENVIRONMENT = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}


def _side_path(tree: Path, folder: Path) -> Path:
    """A folder whose zoo_core and zoo_plugins are ``tree``'s own sources."""
    folder.mkdir(parents=True)
    (folder / "zoo_core").symlink_to(tree / "zoo_core")
    (folder / "zoo_plugins").symlink_to(tree / "plugins")
    return folder


def _seconds(path: Path, arguments: list[str]) -> float:
    # Each side keeps its own card cache: one shared cache would be rewritten by
    # every other run and both sides would always miss it. The cache sits beside
    # the side's folder, not in it (that folder is on sys.path).
    environment = {**_ENVIRONMENT, "PYTHONPATH": str(path), "ZOO_CACHE": f"{path}-cache"}
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "zoo_core.cli", *arguments], cwd=path, env=environment,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - started


def measure(commit: str, rounds: int) -> dict:
    with tempfile.TemporaryDirectory() as scratch:
        earlier = Path(scratch) / "earlier"
        subprocess.run(["git", "worktree", "add", "--detach", str(earlier), commit], cwd=ROOT, check=True,
                       capture_output=True)
        try:
            sides = {"this checkout": _side_path(ROOT, Path(scratch) / "now"),
                     commit: _side_path(earlier, Path(scratch) / "then")}
            results = {}
            load_before = machine_load()
            for name, arguments in COMMANDS.items():
                for path in sides.values():
                    _seconds(path, arguments)  # warm-up: bytecode and card caches
                times: dict[str, list[float]] = {side: [] for side in sides}
                for round_ in range(rounds):
                    for side in (list(sides) if round_ % 2 == 0 else list(reversed(sides))):
                        times[side].append(_seconds(sides[side], arguments))
                ratios = [now / then for now, then in zip(times["this checkout"], times[commit])]
                results[name] = {"seconds": {side: spread(values) for side, values in times.items()},
                                 "ratio": median_interval(ratios), "ratio_spread": spread(ratios)}
            return {"commit": commit, "rounds": rounds, "results": results,
                    "load": (load_before, machine_load())}
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(earlier)], cwd=ROOT, check=False,
                           capture_output=True)


def section(report: dict) -> str:
    commit = report["commit"]
    lines = [
        "<!-- against-commit: begin -->",
        f"## Start-up against commit {commit} (fresh processes, alternating rounds)",
        "",
        f"`.venv/bin/python -m benchmarks.bench_against_commit {commit} --rounds {report['rounds']}`, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; machine load before {load_text(report['load'][0])}, "
        f"after {load_text(report['load'][1])}. Each side imports its own sources; ratios are taken round by round "
        "(this checkout / the commit; below 1 is faster).",
        "",
        f"| command | this checkout (s) | {commit} (s) | ratio, median [95% interval] (min–max) |",
        "|---|---:|---:|---:|",
    ]
    for name, result in report["results"].items():
        seconds, ratio, ratio_spread = result["seconds"], result["ratio"], result["ratio_spread"]
        lines.append(f"| `{name}` | {spread_text(seconds['this checkout'], '.3f')} | {spread_text(seconds[commit], '.3f')} "
                     f"| **{ratio['median']:.3f}** [{ratio['low']:.3f}–{ratio['high']:.3f}] "
                     f"({ratio_spread['min']:.3f}–{ratio_spread['max']:.3f}) |")
    lines.append("<!-- against-commit: end -->")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("commit", help="the earlier commit to compare with")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--write", action="store_true", help="put the result into docs/benchmarks.md")
    args = parser.parse_args()
    text = section(measure(args.commit, args.rounds))
    print(text)
    if args.write:
        write_section("against-commit", text)


if __name__ == "__main__":
    main()
