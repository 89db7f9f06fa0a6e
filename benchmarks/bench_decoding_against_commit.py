"""Loading, cached decoding and row batching: this checkout against an earlier commit, alternated.

    .venv/bin/python -m benchmarks.bench_decoding_against_commit main [--rounds 8]

Each side runs in a fresh process that imports its own sources (as
`bench_against_commit` arranges them), builds gpt-char-mini with random weights
(seed 0, one thread) and measures, in CPU seconds of the process (this machine
is shared: wall-clock time counts the neighbours' work too):

- loading the shipped variant (`zoo_core.load`: build, verify, load its weights),
  card cache and file checks warm: the best of 5, milliseconds;
- cached sampling, 63 tokens from one, seeded: the best of 15 runs, per token;
- a row batch (`make_row_batch`, what `zoo serve` steps) of 1 and of 16 rows,
  40 greedy-fed steps after 3-token prompts: the best of 3, tokens per second.

The sides alternate, the order reversing every round, and the ratios are taken
round by round. The sampled tokens of both sides must be equal (checked).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.bench_against_commit import _side_path
from benchmarks.common import ROOT, machine_load, median_interval

VARIANT = "gpt-char-mini"
TOKENS = 63
STEPS = 40


def _side() -> dict:
    """The measurements of whichever zoo is on the path (run in a child process)."""
    import time

    import torch

    import zoo_core
    from zoo_core.inference.sampling import sample_tokens
    from zoo_core.loading.api import build_network

    torch.set_num_threads(1)
    zoo_core.load(VARIANT)  # warm: the card cache, the verified-file cache, bytecode
    load_ms = []
    for _ in range(5):
        began = time.process_time()
        zoo_core.load(VARIANT)
        load_ms.append((time.process_time() - began) * 1e3)
    torch.manual_seed(0)
    model = build_network(zoo_core.get_variant(VARIANT)).eval()
    start = torch.zeros(1, 1, dtype=torch.long)

    def sample():
        return sample_tokens(model, start, TOKENS, generator=torch.Generator().manual_seed(1), use_cache=True)

    tokens = sample()
    per_token = []
    for _ in range(15):
        began = time.process_time()
        sample()
        per_token.append((time.process_time() - began) / TOKENS)

    def rows_per_second(rows: int) -> float:
        with torch.inference_mode():
            batch = model.make_row_batch(rows)
            for row in range(rows):
                cache = model.make_cache()
                model(torch.tensor([[row % 60 + 1, 2, 3]]), cache=cache)
                batch.add(row, cache)
            began = time.process_time()
            for step in range(STEPS):
                batch.step([(step + row) % 60 for row in range(rows)])
            return STEPS * rows / (time.process_time() - began)

    return {
        "load_ms": min(load_ms),
        "us_per_token": min(per_token) * 1e6,
        "one_row_tokens_per_second": max(rows_per_second(1) for _ in range(3)),
        "sixteen_rows_tokens_per_second": max(rows_per_second(16) for _ in range(3)),
        "tokens": tokens[0].tolist(),
    }


def _run_side(path: Path) -> dict:
    environment = {**os.environ, "PYTHONPATH": str(path), "ZOO_CACHE": f"{path}-cache", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        # ROOT after the side's folder: the side's zoo_core is found first, this module after it
        [
            sys.executable,
            "-c",
            f"import json, sys; sys.path.append({str(ROOT)!r}); "
            "from benchmarks.bench_decoding_against_commit import _side; print(json.dumps(_side()))",
        ],
        cwd=path,
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(commit: str, rounds: int) -> dict:
    with tempfile.TemporaryDirectory() as scratch:
        earlier = Path(scratch) / "earlier"
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(earlier), commit], cwd=ROOT, check=True, capture_output=True
        )
        try:
            sides = {
                "this checkout": _side_path(ROOT, Path(scratch) / "now"),
                commit: _side_path(earlier, Path(scratch) / "then"),
            }
            runs: dict[str, list[dict]] = {side: [] for side in sides}
            load_before = machine_load()
            for round_ in range(rounds):
                for side in list(sides) if round_ % 2 == 0 else list(reversed(sides)):
                    runs[side].append(_run_side(sides[side]))
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(earlier)], cwd=ROOT, check=False, capture_output=True
            )
    now, then = runs["this checkout"], runs[commit]
    report: dict = {
        "commit": commit,
        "load": (load_before, machine_load()),
        "rounds": rounds,
        "same_tokens": all(a["tokens"] == b["tokens"] for a, b in zip(now, then)),
    }
    for key in ("load_ms", "us_per_token", "one_row_tokens_per_second", "sixteen_rows_tokens_per_second"):
        report[key] = {
            "this checkout": statistics.median(r[key] for r in now),
            commit: statistics.median(r[key] for r in then),
            "ratio": median_interval([a[key] / b[key] for a, b in zip(now, then)]),
        }
    report["sixteen_over_one"] = {
        side: statistics.median(r["sixteen_rows_tokens_per_second"] / r["one_row_tokens_per_second"] for r in values)
        for side, values in runs.items()
    }
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("commit", help="the earlier commit to compare with")
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    print(json.dumps(measure(args.commit, args.rounds), indent=1))


if __name__ == "__main__":
    main()
