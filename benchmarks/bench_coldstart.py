"""Cold start and memory: `zoo list`, `zoo load`, `zoo sample` as fresh
processes against `import torch` in a fresh process, in alternating rounds.

Each command is a new Python process timed from start to exit; its peak
resident memory comes from the kernel (`os.wait4`). `zoo list` runs once
before timing, so its validated index is in the cache, as it is for anyone who
has listed before (a changed registry costs one validated listing).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from benchmarks.common import ROOT, spread

ROUNDS = 3
COMMANDS = {
    "python": [sys.executable, "-c", "pass"],
    "import torch": [sys.executable, "-c", "import torch"],
    "zoo list": [sys.executable, "-m", "zoo_core.cli", "list"],
    "zoo load transformer-6b-sin": [sys.executable, "-m", "zoo_core.cli", "load", "transformer-6b-sin"],
    "zoo sample gpt-char-mini": [sys.executable, "-m", "zoo_core.cli", "sample", "gpt-char-mini", "--prompt", "ROMEO:",
                                 "--max-new-tokens", "20"],
}


def _run(command: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of one fresh process."""
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        raise RuntimeError(f"{' '.join(command)} exited with {process.returncode}")
    return seconds, usage.ru_maxrss / 1024


def run() -> dict:
    _run(COMMANDS["zoo list"])  # fills the listing cache
    seconds = {name: [] for name in COMMANDS}
    memory = {name: [] for name in COMMANDS}
    for round_ in range(ROUNDS):
        names = list(COMMANDS) if round_ % 2 == 0 else list(reversed(COMMANDS))
        for name in names:
            wall, rss = _run(COMMANDS[name])
            seconds[name].append(wall)
            memory[name].append(rss)
    torch_seconds = seconds["import torch"]
    return {
        "seconds": {name: spread(values) for name, values in seconds.items()},
        "peak_rss_mb": {name: spread(values) for name, values in memory.items()},
        "list_over_torch": spread([a / b for a, b in zip(seconds["zoo list"], torch_seconds)]),
        "load_minus_torch": spread([a - b for a, b in zip(seconds["zoo load transformer-6b-sin"], torch_seconds)]),
        "sample_minus_torch": spread([a - b for a, b in zip(seconds["zoo sample gpt-char-mini"], torch_seconds)]),
        "sample_rss_minus_torch": spread([a - b for a, b in zip(memory["zoo sample gpt-char-mini"], memory["import torch"])]),
    }


if __name__ == "__main__":
    print(run())
