"""Whole-run wall time: `zoo train gpt-char-mini` against nanoGPT's train.py loop.

Both are separate processes timed from start to exit (Python start-up and
`import torch` included) on the same recipe (nanoGPT's shakespeare_char CPU
settings, which gpt-char-mini's card records) with the same number of
evaluations: `zoo train --steps STEPS` evaluates at step 1 and at the end
(the recipe evaluates every 250 steps), nanoGPT with `eval_interval = STEPS` at
iterations 0 and STEPS. nanoGPT's train.py is not shipped, so its loop is
emulated by `benchmarks/nanogpt_train_loop.py` with the real model.py; its
data preparation (prepare.py) runs once before timing, as it would.
Rounds alternate which side goes first.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from benchmarks.common import NANOGPT_MODEL, ROOT, spread, timed

STEPS, ROUNDS = 100, 2
THREADS = 1  # OMP_NUM_THREADS for both processes


def _prepare(folder: Path) -> None:
    # nanoGPT's data/shakespeare_char/prepare.py: character ids, 90/10 split, uint16 .bin files
    text = (ROOT / "data" / "tinyshakespeare.txt").read_text(encoding="utf-8")
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    cut = int(len(text) * 0.9)
    np.array([index[c] for c in text[:cut]], dtype=np.uint16).tofile(folder / "train.bin")
    np.array([index[c] for c in text[cut:]], dtype=np.uint16).tofile(folder / "val.bin")
    (folder / "vocab_size").write_text(str(len(chars)))


def run() -> dict:
    if not NANOGPT_MODEL.exists():
        return {"skipped": f"nanoGPT's model.py not found at {NANOGPT_MODEL}: no train.py reference to emulate"}
    times = {"zoo": [], "nanogpt": []}
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        _prepare(folder)
        commands = {
            "zoo": [sys.executable, "-m", "zoo_core.cli", "train", "gpt-char-mini", "--steps", str(STEPS), "--quiet",
                    "--out", str(folder / "zoo")],
            "nanogpt": [sys.executable, str(ROOT / "benchmarks" / "nanogpt_train_loop.py"), str(folder), str(folder),
                        str(STEPS), str(STEPS), str(NANOGPT_MODEL)],
        }
        environment = {**os.environ, "OMP_NUM_THREADS": str(THREADS)}
        for round_ in range(ROUNDS):
            for side in (("zoo", "nanogpt") if round_ % 2 == 0 else ("nanogpt", "zoo")):
                times[side].append(timed(lambda: subprocess.run(commands[side], check=True, cwd=ROOT, capture_output=True, env=environment)))
    ratios = [z / n for z, n in zip(times["zoo"], times["nanogpt"])]
    return {"steps": STEPS, "threads": THREADS, "zoo": spread(times["zoo"]), "nanogpt": spread(times["nanogpt"]), "ratio": spread(ratios)}


if __name__ == "__main__":
    print(run())
