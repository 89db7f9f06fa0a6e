"""Which speedrun ingredients pay on this CPU: gpt-char-speedrun with each one switched off in turn
(and one the recipe leaves out, switched on).

Every arm trains for the same wall time as the full recipe: each arm's seconds
per step are measured first (all arms round-robin, a few steps each, the median),
and an arm gets as many steps as fit in the full recipe's steps times its
seconds per step (its schedule spans those steps). Its weights are copied every
tenth of its steps (not timed) and scored afterwards exactly as `zoo eval`
scores, bits per character over the whole validation text: the last copy gives
the arm's final score, and a search over the copies (the curve falls
monotonically in these runs, so bisection finds its first copy at or below the
target) gives its time to target in training seconds. One seed, the recipe's,
for every arm. Writes the table into docs/speedrun.md:

    .venv/bin/python -m benchmarks.speedrun_ablation [--target BITS]
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import datetime, timezone

import torch

import zoo_core
from benchmarks.common import ROOT, load_text, machine_load
from zoo_core.catalogue.registry import Variant
from zoo_core.corpus.batches import BatchSampler, Corpus
from zoo_core.devices import Placement
from zoo_core.evaluation.bits import bits_per_byte, validation_text
from zoo_core.inference.model import ZooModel
from zoo_core.loading.texts import variant_text
from zoo_core.training.job import TrainingJob
from zoo_core.training.loop import StandardTrainer, make_optimizer, seeded_network
from zoo_core.training.step import training_step

VARIANT = "gpt-char-speedrun"
NANOGPT_FINAL = 2.7022  # nanoGPT's README CPU recipe, zoo eval bits per character (issue 29's measurement)
PAGE = ROOT / "docs" / "speedrun.md"
BEGIN, END = "<!-- speedrun_ablation: begin -->", "<!-- speedrun_ablation: end -->"
CALIBRATION_ROUNDS, CALIBRATION_STEPS = 3, 8
SNAPSHOTS = 10


def arms(recipe) -> dict[str, tuple[dict, dict]]:
    """Arm name: (config changes, recipe changes); None removes a config key."""
    return {
        "every ingredient (the recipe)": ({}, {}),
        "AdamW instead of Muon": ({}, {"optimizer": "adamw", "muon_learning_rate": None}),
        "cosine schedule instead of warm-up/stable/decay": (
            {},
            {"lr_schedule": "cosine", "cooldown_fraction": None, "min_learning_rate": recipe.learning_rate / 10},
        ),
        "ReLU instead of ReLU²": ({"mlp": "relu"}, {}),
        "no QK-norm": ({"qk_norm": None}, {}),
        "with a logit soft-cap of 15 (not in the recipe)": ({"logit_softcap": 15.0}, {}),
        "4 layers instead of 2 (gpt-char-mini's depth)": ({"n_layer": 4}, {}),
    }


def arm_variant(base: Variant, config_changes: dict, recipe_changes: dict) -> Variant:
    card = base.card
    config = {k: v for k, v in {**card.config, **config_changes}.items() if v is not None}
    recipe = card.recipe.model_copy(update=recipe_changes)
    recipe = type(recipe).model_validate(recipe.model_dump())  # checked as a card would be
    return Variant(card=card.model_copy(update={"config": config, "recipe": recipe}), source=base.source, plugin=base.plugin)


def seconds_per_step(variants: dict[str, Variant], corpus: Corpus) -> dict[str, float]:
    """Each arm's median seconds per update, measured round-robin so drift in the machine hits all alike."""
    setups = {}
    for name, variant in variants.items():
        recipe = variant.card.recipe
        network = seeded_network(lambda v=variant: zoo_core.build_network(v), recipe.seed)
        sampler = BatchSampler(corpus.train, variant.card.context_length, recipe.batch_size, recipe.seed)
        setups[name] = (network, make_optimizer(network, recipe), sampler, recipe, [])
    for _ in range(CALIBRATION_ROUNDS):
        for network, optimizer, sampler, recipe, times in setups.values():
            for step in range(1, CALIBRATION_STEPS + 1):
                started = time.perf_counter()
                training_step(network, optimizer, *sampler.next(), step=step, recipe=recipe, placement=Placement())
                times.append(time.perf_counter() - started)
    return {name: statistics.median(times[2:]) for name, (*_, times) in setups.items()}


def train_and_score(variant: Variant, corpus: Corpus, text: str, target: float) -> dict:
    recipe, tokenizer = variant.card.recipe, zoo_core.load_tokenizer(variant)
    every = max(1, recipe.steps // SNAPSHOTS)
    copies: list[tuple[float, int, dict]] = []

    def keep(state):
        copies.append((state.update_seconds, state.step, {k: v.detach().clone() for k, v in state.model.items()}))

    network = seeded_network(lambda: zoo_core.build_network(variant), recipe.seed)
    job = TrainingJob(
        recipe=recipe, corpus=corpus, context_length=variant.card.context_length, checkpoint_every=every, on_checkpoint=keep
    )
    result = StandardTrainer().run(network, job)
    copies.append((result.update_seconds, result.steps, {k: v.clone() for k, v in network.state_dict().items()}))
    scored, before = validation_text(text, recipe.train_fraction)
    scores: dict[int, float] = {}

    def score(index: int) -> float:
        if index not in scores:
            network.load_state_dict(copies[index][2])
            scores[index] = bits_per_byte(ZooModel(variant, tokenizer, network), scored, before)["bits_per_character"]
        return scores[index]

    final = score(len(copies) - 1)
    reached = None
    if final <= target:
        low, high = 0, len(copies) - 1  # the first copy at or below the target lies in (low, high]
        if score(0) <= target:
            high = 0
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (low, middle) if score(middle) <= target else (middle, high)
        reached = (copies[high][0], copies[high][1])
    return {"steps": result.steps, "seconds": result.update_seconds, "final": final, "reached": reached}


def run(target: float) -> dict:
    load_before, started = machine_load(), time.perf_counter()
    base = zoo_core.get_variant(VARIANT)
    tokenizer = zoo_core.load_tokenizer(base)
    text = variant_text(base, None).text
    corpus = Corpus.from_text(text, tokenizer, base.card.recipe.train_fraction)
    variants = {name: arm_variant(base, *changes) for name, changes in arms(base.card.recipe).items()}
    per_step = seconds_per_step(variants, corpus)
    full = next(iter(variants))
    budget = base.card.recipe.steps * per_step[full]
    results = {}
    for name, variant in variants.items():
        steps = max(1, round(budget / per_step[name]))
        variant = arm_variant(variant, {}, {"steps": steps, "eval_every": steps})
        results[name] = {"seconds_per_step": per_step[name], **train_and_score(variant, corpus, text, target)}
        print(name, results[name])
    return {
        "results": results,
        "budget": budget,
        "target": target,
        "seed": base.card.recipe.seed,
        "load_before": load_before,
        "load_after": machine_load(),
        "minutes": (time.perf_counter() - started) / 60,
    }


def table(result: dict) -> str:
    results = result["results"]
    full = next(iter(results.values()))
    lines = [
        BEGIN,
        f"`python -m benchmarks.speedrun_ablation`, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, "
        f"{result['minutes']:.1f} minutes, torch {torch.__version__}, {torch.get_num_threads()} threads; machine load "
        f"before {load_text(result['load_before'])}, after {load_text(result['load_after'])}. Every arm trains for the "
        f"recipe's wall time ({result['budget']:.1f} s of updates at the full recipe's measured pace), seed "
        f"{result['seed']}; target {result['target']:.4f} bits per character (nanoGPT's final).",
        "",
        "| arm | seconds per step | steps in the same time | final bits per character | Δ against the recipe "
        "| time to target (training s) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, r in results.items():
        reached = f"{r['reached'][0]:.1f} (step {r['reached'][1]})" if r["reached"] else "not reached"
        delta = "" if r is full else f"{r['final'] - full['final']:+.4f}"
        lines.append(
            f"| {name} | {r['seconds_per_step'] * 1000:.0f} ms | {r['steps']} | {r['final']:.4f} | {delta} | {reached} |"
        )
    lines.append(END)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", type=float, default=NANOGPT_FINAL, help=f"bits per character (default {NANOGPT_FINAL})")
    args = parser.parse_args()
    section = table(run(args.target))
    text = PAGE.read_text()
    PAGE.write_text(text[: text.index(BEGIN)] + section + text[text.index(END) + len(END) :])
    print(section)


if __name__ == "__main__":
    main()
