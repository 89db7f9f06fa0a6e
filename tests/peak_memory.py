"""`python -m tests.peak_memory [--from MODULE:FUNCTION] ARGS...`: run `zoo ARGS...` in this
fresh process (in the folder $ZOO_WORKDIR) and print, as the last line of stdout, a JSON
object: its exit code, and its peak resident memory (the kernel's VmHWM) in MiB, ``peak_mib``,
and above the start, ``growth_mib``, and the seconds since the start, ``seconds``. The start is after the imports every command makes, or,
with ``--from``, the moment that function is entered: its high-water mark is reset then
(/proc/self/clear_refs), so a training step is measured apart from the load before it."""

from __future__ import annotations

import importlib
import json
import os
import sys
import time

import torch  # noqa: F401  (every command that loads weights imports it: part of the start)

from zoo_core import cli


def _status_mib(field: str) -> float:
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith(field + ":"))
    return int(line.split()[1]) / 1024  # kB


def _start_at(target: str, start: dict) -> None:
    module_name, function_name = target.split(":")
    module = importlib.import_module(module_name)
    function = getattr(module, function_name)

    def measured(*args, **kwargs):
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")  # the high-water mark starts again from what is resident now
        start["mib"] = _status_mib("VmRSS")
        start["time"] = time.perf_counter()
        return function(*args, **kwargs)

    setattr(module, function_name, measured)


if __name__ == "__main__":
    arguments = sys.argv[1:]
    start = {"mib": _status_mib("VmHWM"), "time": time.perf_counter()}
    if arguments[0] == "--from":
        _start_at(arguments[1], start)
        arguments = arguments[2:]
    os.chdir(os.environ.get("ZOO_WORKDIR", "."))
    code = cli.main(arguments)
    peak = _status_mib("VmHWM")
    seconds = round(time.perf_counter() - start["time"], 3)
    result = {"code": code, "start_mib": round(start["mib"]), "peak_mib": round(peak), "seconds": seconds}
    print(json.dumps({**result, "growth_mib": round(peak - start["mib"])}))
