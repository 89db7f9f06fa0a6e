"""Whole-run wall time: `zoo train gpt-char-mini` against nanoGPT's train.py loop.

Every side is a separate process timed from start to exit (Python start-up and
`import torch` included) on the same recipe (nanoGPT's shakespeare_char CPU
settings, which gpt-char-mini's card records) with the same number of
evaluations: `zoo train --steps STEPS` evaluates at step 1 and at the end
(the recipe evaluates every 250 steps), nanoGPT with `eval_interval = STEPS` at
iterations 0 and STEPS. nanoGPT's train.py is not shipped, so its loop is
emulated by `benchmarks/nanogpt_train_loop.py` with the real model.py; its
data preparation (prepare.py) runs once before timing, as it would.

Evaluation size differs between the two projects' recipes, so nanoGPT runs
twice per round: scoring as many windows per split as the zoo recipe's
`eval_windows` (the same recipe: eval_iters = eval_windows / batch, rounded
up), and with the README's CPU eval_iters=20 (240 windows, a quarter of what
the zoo's card records). The zoo's first evaluation uses a quarter of the
recipe's windows (`--interim-eval-windows` default), its final one all of them.
Rounds alternate which side goes first.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

import zoo_core
from benchmarks.common import NANOGPT_MODEL, ROOT, spread, timed
from zoo_core.training.loop import interim_windows

STEPS, ROUNDS = 25, 2  # few steps: the loops differ in their evaluations, and the runner has 5 minutes in all
VARIANT = "gpt-char-mini"
README_EVAL_ITERS = 20  # nanoGPT README's CPU command
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
    recipe = zoo_core.get_variant(VARIANT).card.recipe
    recipe_eval_iters = -(-recipe.eval_windows // recipe.batch_size)  # the recipe's windows, in nanoGPT's batches
    sides = {"zoo": None, "nanogpt_recipe_windows": recipe_eval_iters, "nanogpt_readme": README_EVAL_ITERS}
    times = {side: [] for side in sides}
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        _prepare(folder)
        commands = {
            side: [sys.executable, "-m", "zoo_core.cli", "train", VARIANT, "--steps", str(STEPS), "--quiet",
                   "--out", str(folder / "zoo")] if eval_iters is None else
                  [sys.executable, str(ROOT / "benchmarks" / "nanogpt_train_loop.py"), str(folder), str(folder),
                   str(STEPS), str(STEPS), str(NANOGPT_MODEL), str(eval_iters)]
            for side, eval_iters in sides.items()
        }
        environment = {**os.environ, "OMP_NUM_THREADS": str(THREADS)}
        for round_ in range(ROUNDS):
            for side in (list(sides) if round_ % 2 == 0 else list(reversed(sides))):
                times[side].append(timed(lambda: subprocess.run(commands[side], check=True, cwd=ROOT, capture_output=True, env=environment)))
    result = {"steps": STEPS, "threads": THREADS, "eval_windows": recipe.eval_windows, "batch_size": recipe.batch_size,
              "recipe_eval_iters": recipe_eval_iters, "readme_eval_iters": README_EVAL_ITERS,
              "zoo_interim_windows": interim_windows(recipe)}
    for side in sides:
        result[side] = spread(times[side])
        if side != "zoo":
            result[f"ratio_{side}"] = spread([z / n for z, n in zip(times["zoo"], times[side])])
    return result


if __name__ == "__main__":
    print(run())
