"""Time to quality: `zoo train gpt-char-speedrun` against nanoGPT's train.py, README CPU recipe.

Both sides are whole processes with their own default threads, timed from start
to exit, one after the other, the order swapped every round:

- nanoGPT: its own `train.py` from ../shared/reference/nanogpt (run from a copy,
  on the zoo's corpus prepared by its own `prepare.py`) with its README's CPU
  command. Its checkpoint is imported (`zoo import nanogpt`) and scored by
  `zoo eval`: bits per character over the whole validation text.
- the zoo: `zoo train gpt-char-speedrun --out DIR`, then the same `zoo eval`.

The zoo's time to target is its whole-process wall time when its final score is
at or below nanoGPT's final score of the same round. The curves: nanoGPT's own
validation estimates as its log prints them (every 250 iterations, 20 random
batches, nats turned into bits), against the seconds since its process started;
for the zoo, one more in-process run of the speedrun recipe whose weights are
copied every few steps (the copying not timed) and scored afterwards exactly as
`zoo eval` scores, placed at the training seconds so far plus the whole-process
run's seconds outside training (start-up, data, evaluations, writing). Not in
the test suite; writes its section of docs/benchmarks.md and
docs/speedrun-curves.svg:

    .venv/bin/python -m benchmarks.bench_speedrun [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from datetime import datetime, timezone
from pathlib import Path

from benchmarks.common import ROOT, load_text, machine_load, section_markers, spread, spread_text, write_section

NANOGPT_DIR = ROOT.parent / "shared" / "reference" / "nanogpt"
# nanoGPT's README CPU command for shakespeare_char (see ../shared/reference/nanogpt/README.md).
README_ARGS = [
    "config/train_shakespeare_char.py",
    "--device=cpu",
    "--compile=False",
    "--eval_iters=20",
    "--log_interval=1",
    "--block_size=64",
    "--batch_size=12",
    "--n_layer=4",
    "--n_head=4",
    "--n_embd=128",
    "--max_iters=2000",
    "--lr_decay_iters=2000",
    "--dropout=0.0",
]
VARIANT = "gpt-char-speedrun"
ROUNDS = 2  # nanoGPT's side takes two to three minutes a round: more would pass ten minutes
SNAPSHOT_EVERY = 50  # steps between the curve run's copies of the weights
CURVE_PICTURE = ROOT / "docs" / "speedrun-curves.svg"
ZOO = [sys.executable, "-m", "zoo_core.cli"]


def prepare_nanogpt(work: Path) -> Path:
    """A writable copy of nanoGPT with the zoo's corpus prepared by its own prepare.py."""
    folder = work / "nanogpt"
    shutil.copytree(NANOGPT_DIR, folder)
    data = folder / "data" / "shakespeare_char"
    shutil.copyfile(ROOT / "data" / "tinyshakespeare.txt", data / "input.txt")  # prepare.py downloads only without it
    subprocess.run([sys.executable, "prepare.py"], cwd=data, check=True, capture_output=True)
    return folder


def timed_lines(command: list[str], cwd: Path, env: dict) -> tuple[float, list[tuple[float, str]]]:
    """Run ``command``; its wall seconds and each output line with the seconds at which it came."""
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = [(time.perf_counter() - started, line.rstrip("\n")) for line in process.stdout]
    if process.wait():
        tail = "\n".join(line for _, line in lines[-15:])
        raise RuntimeError(f"{' '.join(command)} failed:\n{tail}")
    return time.perf_counter() - started, lines


def zoo_bits(name: str, env: dict, registry: Path | None = None) -> float:
    """`zoo eval NAME`'s bits per character over the whole validation text."""
    command = [*ZOO, *(["--registry", str(registry)] if registry else []), "eval", name, "--json", "--windows", "1"]
    report = json.loads(subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout)
    return report["validation_bits_per_character"]


def nanogpt_round(folder: Path, out: Path, name: str, env: dict) -> dict:
    seconds, lines = timed_lines([sys.executable, "train.py", *README_ARGS, f"--out_dir={out}"], folder, env)
    curve = []
    for at, line in lines:  # "step 250: train loss 1.9877, val loss 2.0712"
        if line.startswith("step ") and "val loss" in line:
            iteration = int(line.split()[1].rstrip(":"))
            curve.append((at, iteration, float(line.rsplit(" ", 1)[1]) / 0.6931471805599453))
    subprocess.run([*ZOO, "import", "nanogpt", str(out / "ckpt.pt"), "--name", name], env=env, check=True, capture_output=True)
    return {"seconds": seconds, "bits": zoo_bits(name, env), "curve": curve}


def zoo_round(out: Path, name: str, env: dict) -> dict:
    seconds, _ = timed_lines([*ZOO, "train", VARIANT, "--name", name, "--out", str(out), "--quiet"], ROOT, env)
    registry = out / "registry.toml"
    metrics = tomllib.loads(registry.read_text())[name]["metrics"]
    return {"seconds": seconds, "bits": zoo_bits(name, env, registry), "training_seconds": metrics["training_seconds"]}


def zoo_curve() -> list[tuple[float, int, float]]:
    """(training seconds, step, bits per character) of the speedrun recipe every SNAPSHOT_EVERY steps."""
    import zoo_core
    from zoo_core.corpus.batches import Corpus
    from zoo_core.evaluation.bits import bits_per_byte, validation_text
    from zoo_core.inference.model import ZooModel
    from zoo_core.loading.texts import variant_text
    from zoo_core.training.job import TrainingJob
    from zoo_core.training.loop import StandardTrainer, seeded_network

    variant = zoo_core.get_variant(VARIANT)
    recipe, tokenizer = variant.card.recipe, zoo_core.load_tokenizer(variant)
    text = variant_text(variant, None).text
    corpus = Corpus.from_text(text, tokenizer, recipe.train_fraction)
    snapshots = []

    def keep(state):
        snapshots.append((state.update_seconds, state.step, {k: v.detach().clone() for k, v in state.model.items()}))

    network = seeded_network(lambda: zoo_core.build_network(variant), recipe.seed)
    job = TrainingJob(
        recipe=recipe, corpus=corpus, context_length=variant.card.context_length,
        checkpoint_every=SNAPSHOT_EVERY, on_checkpoint=keep,
    )
    result = StandardTrainer().run(network, job)
    # a copy: scoring loads each snapshot into this same network
    snapshots.append((result.update_seconds, result.steps, {k: v.clone() for k, v in network.state_dict().items()}))
    scored, before = validation_text(text, recipe.train_fraction)
    curve = []
    for seconds, step, weights in snapshots:
        network.load_state_dict(weights)
        bits = bits_per_byte(ZooModel(variant, tokenizer, network), scored, before)["bits_per_character"]
        curve.append((seconds, step, bits))
    return curve


def run(rounds: int) -> dict:
    load_before, started = machine_load(), time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="zoo-speedrun-") as scratch:
        work = Path(scratch)
        env = {**os.environ, "ZOO_HOME": str(work / "home"), "PYTHONPATH": str(ROOT)}
        folder = prepare_nanogpt(work)
        results: dict[str, list[dict]] = {"nanogpt": [], "zoo": []}
        for index in range(rounds):
            sides = ["nanogpt", "zoo"] if index % 2 == 0 else ["zoo", "nanogpt"]
            for side in sides:
                if side == "nanogpt":
                    results[side].append(nanogpt_round(folder, work / f"nanogpt-{index}", f"nanogpt-round-{index}", env))
                else:
                    results[side].append(zoo_round(work / f"zoo-{index}", f"speedrun-round-{index}", env))
                print(side, index, {k: v for k, v in results[side][-1].items() if k != "curve"}, file=sys.stderr)
        curve = zoo_curve()
    return {
        "rounds": rounds,
        "results": results,
        "zoo_curve": curve,
        "load_before": load_before,
        "load_after": machine_load(),
        "minutes": (time.perf_counter() - started) / 60,
    }


def draw_curves(result: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4))
    nanogpt = result["results"]["nanogpt"][0]
    axes.plot([t for t, _, _ in nanogpt["curve"]], [b for _, _, b in nanogpt["curve"]], "o-", label="nanoGPT train.py (its own estimate)")
    outside = _zoo_overhead(result)
    zoo = result["zoo_curve"]
    axes.plot([t + outside for t, _, _ in zoo], [b for _, _, b in zoo], "-", label=f"zoo train {VARIANT} (zoo eval)")
    target = statistics.median(r["bits"] for r in result["results"]["nanogpt"])
    axes.axhline(target, color="grey", linestyle="--", label=f"nanoGPT's final, zoo eval ({target:.3f})")
    axes.set_xlabel("seconds since the process started")
    axes.set_ylabel("validation bits per character")
    axes.set_ylim(target - 0.5, target + 1.5)
    axes.legend()
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(CURVE_PICTURE, metadata={"Date": None})
    plt.close(figure)


def _zoo_overhead(result: dict) -> float:
    """The whole-process run's seconds outside training updates (median over rounds)."""
    return statistics.median(r["seconds"] - r["training_seconds"] for r in result["results"]["zoo"])


def section(result: dict) -> str:
    import torch

    nanogpt, zoo = result["results"]["nanogpt"], result["results"]["zoo"]
    ratios = [z["seconds"] / n["seconds"] for z, n in zip(zoo, nanogpt)]
    reached = [z["bits"] <= n["bits"] for z, n in zip(zoo, nanogpt)]
    target = statistics.median(n["bits"] for n in nanogpt)
    outside = _zoo_overhead(result)
    crossing = next(((t + outside, step) for t, step, bits in result["zoo_curve"] if bits <= target), None)
    begin, end = section_markers("bench_speedrun")
    lines = [
        begin,
        "## Time to quality: `zoo train gpt-char-speedrun` against nanoGPT's README CPU recipe",
        "",
        f"`python -m benchmarks.bench_speedrun`, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, "
        f"{result['minutes']:.1f} minutes, torch {torch.__version__}, default threads on both sides "
        f"({os.cpu_count()} cores); machine load before {load_text(result['load_before'])}, after "
        f"{load_text(result['load_after'])}. Whole processes timed from start to exit, {result['rounds']} rounds, "
        "the sides' order swapped every round; figures are median (min–max) over rounds. Both final scores are "
        "`zoo eval`'s bits per character over the whole validation text (nanoGPT's checkpoint after "
        "`zoo import nanogpt`).",
        "",
        "| side | wall seconds | validation bits per character | zoo / nanoGPT |",
        "|---|---:|---:|---:|",
        f"| nanoGPT `train.py` README CPU command (2,000 iterations) | {spread_text(spread([n['seconds'] for n in nanogpt]), '.1f')} "
        f"| {spread_text(spread([n['bits'] for n in nanogpt]), '.4f')} | |",
        f"| `zoo train {VARIANT}` | {spread_text(spread([z['seconds'] for z in zoo]), '.1f')} "
        f"| {spread_text(spread([z['bits'] for z in zoo]), '.4f')} | **{spread_text(spread(ratios), '.3f')}×** |",
        "",
        f"Round by round, the zoo's final score was at or below nanoGPT's in {sum(reached)} of {len(reached)} rounds; "
        f"target: at most 0.25× nanoGPT's wall time with a score at or below its.",
        "",
        "Time to nanoGPT's final score from the curve run: "
        + (
            f"step {crossing[1]}, {crossing[0]:.1f} s after start ({outside:.1f} s of it outside training updates, "
            "the whole-process runs' median)."
            if crossing
            else "not reached within the recipe's steps."
        ),
        "",
        "![validation bits per character against seconds since start](speedrun-curves.svg)",
        "",
        f"nanoGPT's points are its own estimates (20 random batches of each split, every 250 iterations) as its log "
        f"printed them; the zoo's are its weights every {SNAPSHOT_EVERY} steps of one more run of the recipe, "
        "scored afterwards as `zoo eval` scores.",
        end,
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS, help=f"rounds of both sides (default {ROUNDS})")
    args = parser.parse_args()
    if not (NANOGPT_DIR / "train.py").exists():
        sys.exit(f"nanoGPT's train.py is not at {NANOGPT_DIR}: nothing to compare with")
    result = run(args.rounds)
    draw_curves(result)
    write_section("bench_speedrun", section(result))
    print(json.dumps({k: v for k, v in result.items() if k != "zoo_curve"}, indent=1, default=str))


if __name__ == "__main__":
    main()
