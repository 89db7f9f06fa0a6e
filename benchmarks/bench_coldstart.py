"""Cold start and memory: `zoo list`, `zoo load`, `zoo sample` as fresh
processes against `import torch` in a fresh process, in alternating rounds.

Each command is a new Python process timed from start to exit; its peak
resident memory is what GNU time reports (`/usr/bin/time -f %M`; a child forked
straight from this large process would inherit its high-water mark). Each zoo command
runs once before timing, so the interpreter's bytecode caches and the zoo's card cache
(validated cards, zoo_core/catalogue/card_cache.py) are warm, as they are for anyone who has run
it before; PYTHONDONTWRITEBYTECODE is dropped from the commands' environment, which
would otherwise keep the bytecode cold.

The `zoo` script skips Python's last garbage collection at exit (`gc.freeze`,
see `zoo_core.cli.console_main`), which a plain `python -c "import torch"` pays;
so `import torch` is also timed with the same exit, for like-for-like differences.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time

from benchmarks.common import ROOT, spread

ROUNDS = 3
COMMANDS = {
    "python": [sys.executable, "-c", "pass"],
    "import torch": [sys.executable, "-c", "import torch"],
    "import torch, zoo's exit": [sys.executable, "-c", "import gc, torch; gc.freeze()"],
    "zoo list": [sys.executable, "-m", "zoo_core.cli", "list"],
    "zoo sample gpt-char-mini": [sys.executable, "-m", "zoo_core.cli", "sample", "gpt-char-mini", "--prompt", "ROMEO:",
                                 "--max-new-tokens", "20"],
}


# What load and sample add is timed inside the process (below); the sample also
# runs whole, for its peak memory.
AFTER_TORCH_COMMANDS = {
    "zoo load transformer-6b-sin": [sys.executable, "-m", "zoo_core.cli", "load", "transformer-6b-sin"],
    "zoo sample gpt-char-mini": COMMANDS["zoo sample gpt-char-mini"],
}


_ENVIRONMENT = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}

# What a command adds to `import torch`, timed inside a fresh process from the end
# of the import to the end of the command: on a shared machine `import torch`
# alone varies by a second from one process to the next, more than the whole
# difference the targets are about.
_AFTER_TORCH = """
import contextlib, io, sys, time
import torch
started = time.perf_counter()
from zoo_core import cli
with contextlib.redirect_stdout(io.StringIO()):
    cli.main(sys.argv[1:])
print(time.perf_counter() - started)
"""


def _after_torch(command: list[str]) -> float:
    arguments = command[command.index("zoo_core.cli") + 1:]
    done = subprocess.run([sys.executable, "-c", _AFTER_TORCH, *arguments], cwd=ROOT, capture_output=True, text=True,
                          check=True, env=_ENVIRONMENT)
    return float(done.stdout.split()[-1])


def _run(command: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB; NaN without GNU time) of one fresh process."""
    gnu_time = shutil.which("time") or ("/usr/bin/time" if os.path.exists("/usr/bin/time") else None)
    with tempfile.NamedTemporaryFile("r") as report:
        wrapped = [gnu_time, "-f", "%M", "-o", report.name, *command] if gnu_time else command
        started = time.perf_counter()
        subprocess.run(wrapped, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=_ENVIRONMENT)
        seconds = time.perf_counter() - started
        text = report.read().strip().splitlines()
    return seconds, (int(text[-1]) / 1024 if gnu_time and text else float("nan"))


def run() -> dict:
    zoo_commands = {tuple(c) for c in [*COMMANDS.values(), *AFTER_TORCH_COMMANDS.values()] if "zoo_core.cli" in c}
    for command in zoo_commands:  # warms the bytecode and card caches
        _run(list(command))
    seconds = {name: [] for name in COMMANDS}
    memory = {name: [] for name in COMMANDS}
    for round_ in range(ROUNDS):
        names = list(COMMANDS) if round_ % 2 == 0 else list(reversed(COMMANDS))
        for name in names:
            wall, rss = _run(COMMANDS[name])
            seconds[name].append(wall)
            memory[name].append(rss)
    after_torch = {name: [_after_torch(command) for _ in range(ROUNDS)] for name, command in AFTER_TORCH_COMMANDS.items()}
    torch_seconds = seconds["import torch"]
    return {
        "after_torch": {name: spread(values) for name, values in after_torch.items()},
        "seconds": {name: spread(values) for name, values in seconds.items()},
        "peak_rss_mb": {name: spread(values) for name, values in memory.items()},
        "list_over_torch": spread([a / b for a, b in zip(seconds["zoo list"], torch_seconds)]),
        "list_over_torch_same_exit": spread([a / b for a, b in zip(seconds["zoo list"], seconds["import torch, zoo's exit"])]),
        "sample_minus_torch": spread([a - b for a, b in zip(seconds["zoo sample gpt-char-mini"], torch_seconds)]),
        "sample_minus_torch_same_exit": spread([a - b for a, b in zip(seconds["zoo sample gpt-char-mini"],
                                                                       seconds["import torch, zoo's exit"])]),
        "sample_rss_minus_torch": spread([a - b for a, b in zip(memory["zoo sample gpt-char-mini"], memory["import torch"])]),
    }


if __name__ == "__main__":
    print(run())
