"""Where `zoo serve`'s batched time goes on SmolLM2: one scheduler step (``RowBatch.step``) of 1, 8 and 16 rows.

The continuous-batching server (zoo_core.web.batching) spends a round of 16
clients in one ``RowBatch.step`` of 16 rows. This times that step in-process,
without HTTP, for SmolLM2-135M-Instruct's Q4_1 file imported packed (the
default) and with ``--dequantize`` (float32), rows interleaved, CPU seconds of
this process, 1 thread; then profiles the packed 16-row step (cProfile, the
functions with the most time of their own).

    OMP_NUM_THREADS=1 python -m benchmarks.bench_row_step [--work DIR] [--rounds 3]

Prints; the findings are written by hand in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.gguf_decoding import import_once
from tests.references import SMOLLM2, reference

ROWS = (1, 8, 16)


def filled_batch(network, rows: int):
    """A row batch of ``rows`` rows, each fed an 8-token prompt of its own through the model's forward."""
    batch = network.make_row_batch(rows)
    for i in range(rows):
        cache = network.make_cache()
        network(torch.tensor([[1, 2, 3, 4 + i, 5, 6, 7, 8]]), cache=cache)
        batch.add(object(), cache)
    return batch


def step_seconds(batch, rows: int, steps: int = 3) -> float:
    tokens = [10 + i for i in range(rows)]
    batch.step(tokens)  # warm
    started = time.process_time()
    for _ in range(steps):
        batch.step(tokens)
    return (time.process_time() - started) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, help="ZOO_HOME kept between runs (default: a temporary folder)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as scratch:
        home = args.work or Path(scratch)
        env = {**os.environ, "ZOO_HOME": str(home), "OMP_NUM_THREADS": "1"}
        import_once(reference(SMOLLM2), env, "smollm2-packed")
        import_once(reference(SMOLLM2), env, "smollm2-float32", "--dequantize")
        os.environ["ZOO_HOME"] = str(home)
        from zoo_core.loading.api import load

        networks = {name: load(name).network.eval() for name in ("smollm2-packed", "smollm2-float32")}
        load_before = os.getloadavg()
        seconds: dict = {(name, rows): [] for name in networks for rows in ROWS}
        with torch.inference_mode():
            batches = {(name, rows): filled_batch(net, rows) for name, net in networks.items() for rows in ROWS}
            for _ in range(args.rounds):
                for key, batch in batches.items():
                    seconds[key].append(step_seconds(batch, key[1]))
            print(f"machine load before {load_before}, after {os.getloadavg()}")
            print("| weights | rows | ms per step (median, min-max) | tokens per CPU second |")
            for (name, rows), values in seconds.items():
                median = statistics.median(values)
                print(f"| {name} | {rows} | {median * 1000:.0f} ({min(values) * 1000:.0f}-{max(values) * 1000:.0f}) "
                      f"| {rows / median:.1f} |")
            profile = cProfile.Profile()
            batch = batches[("smollm2-packed", 16)]
            profile.enable()
            step_seconds(batch, 16)
            profile.disable()
            pstats.Stats(profile).sort_stats("tottime").print_stats(10)


if __name__ == "__main__":
    main()
