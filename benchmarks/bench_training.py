"""Training throughput: the zoo's own architectures against nanoGPT's model.py.

Tokens per second of forward + backward + optimizer step (+ gradient clipping
where the recipe clips), each side with its own optimizer settings: the zoo
through `zoo_core.training.loop.make_optimizer` (fused AdamW) on the network the
plugin manager builds from the shipped card; nanoGPT through its own
`configure_optimizers(..., device_type="cpu")`, which on CPU does not fuse.
nanoGPT's model is built at the card's shape (layers, heads, width, context,
vocabulary, batch) with bias=False, as its shakespeare_char config. Batches are
nanoGPT's `get_batch`: random windows of a random token stream. The sides' steps
are timed in pairs, one step of each back to back, so drift in the machine's
speed hits both halves of a pair alike; each process gives the median of its
pairs' ratios with a 95% confidence interval, and several fresh processes are
run, since the ratio also moves from one process to the next.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import torch

import zoo_core
from benchmarks.common import (
    ROOT,
    median,
    median_interval,
    nanogpt,
    nanogpt_model,
    nanogpt_optimizer,
    paired_step_seconds,
    spread,
    zoo_network,
)
from zoo_core.training.loop import make_optimizer

SHAPES = ("gpt-char-mini", "transformer-6b-sin")
PROCESSES, WARMUP, SECONDS_PER_SHAPE = 3, 3, 5.0
# Rounds of whole seconds per side were too coarse here: with 5 rounds of 1.5 s,
# two runs gave per-round ratios from 0.94 to 1.33 and from 1.03 to 1.57 at
# transformer-6b-sin's shape, as the shared host's speed changed from one round
# to the next. Pairs of single steps gave medians of 1.26, 1.27 and 1.29 in
# three processes, and 1.105 to 1.109 at gpt-char-mini's. Yet two processes
# timing pairs, one after the other, gave 1.16 (1.14-1.20) and 1.25
# (1.23-1.29): something that lasts a whole process (where its memory lies, the
# host's load that minute) moves the ratio too, so each shape is measured in
# several fresh processes and the page shows every one.
THREADS = 1  # the same for both sides; on a shared machine a second thread mostly waits for a core


def _get_batch(data: torch.Tensor, context: int, batch: int, generator: torch.Generator):
    # nanoGPT train.py's get_batch, on an in-memory stream
    ix = torch.randint(len(data) - context, (batch,), generator=generator)
    x = torch.stack([data[i : i + context] for i in ix])
    y = torch.stack([data[i + 1 : i + 1 + context] for i in ix])
    return x, y


def _stepper(model, optimizer, data, context, batch, clip):
    generator = torch.Generator().manual_seed(0)
    model.train()

    def step():
        x, y = _get_batch(data, context, batch, generator)
        _, loss = model(x, y)
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def shape_data(name: str):
    """A shape's recipe, context and vocabulary, and a random token stream its batches are drawn from."""
    card = zoo_core.get_variant(name).card
    vocab = card.tokenizer.vocab_size
    data = torch.randint(0, vocab, (200_000,), generator=torch.Generator().manual_seed(0))
    return card.recipe, card.context_length, vocab, data


def zoo_stepper(network, recipe, data, context: int, run=None):
    """The zoo's step: `make_optimizer` (fused AdamW) on ``network``, forward
    through ``run`` (the network itself, or its compiled wrapper)."""
    return _stepper(network if run is None else run, make_optimizer(network, recipe), data, context, recipe.batch_size,
                    recipe.grad_clip)


def nanogpt_stepper(model, recipe, data, context: int, run=None):
    """nanoGPT's step: its own `configure_optimizers` on ``model``, forward through ``run``."""
    optimizer = nanogpt_optimizer(model, recipe.weight_decay, recipe.learning_rate, (recipe.beta1, recipe.beta2))
    return _stepper(model if run is None else run, optimizer, data, context, recipe.batch_size, recipe.grad_clip)


def measure(name: str, seconds: float) -> dict:
    """Both sides at one shape, in this process: pairs of steps for ``seconds``."""
    module, reference_label = nanogpt()
    recipe, context, vocab, data = shape_data(name)
    zoo, config = zoo_network(name)
    reference = nanogpt_model(module, vocab, context, config["d_model"], config["n_layer"], config["n_head"])
    torch.manual_seed(0)
    steppers = {"zoo": zoo_stepper(zoo, recipe, data, context), "nanogpt": nanogpt_stepper(reference, recipe, data, context)}
    step_seconds = paired_step_seconds(steppers, WARMUP, seconds)
    tokens = recipe.batch_size * context
    ratios = [n / z for z, n in zip(step_seconds["zoo"], step_seconds["nanogpt"])]  # zoo's speed over nanoGPT's, pair by pair
    return {
        "shape": name,
        "reference": reference_label,
        "batch": recipe.batch_size,
        "context": context,
        "zoo_parameters": sum(p.numel() for p in zoo.parameters()),
        "nanogpt_parameters": sum(p.numel() for p in reference.parameters()),
        "zoo_parameter_tensors": len(list(zoo.parameters())),
        "nanogpt_parameter_tensors": len(list(reference.parameters())),
        "zoo": median([tokens / t for t in step_seconds["zoo"]]),  # tokens/s
        "nanogpt": median([tokens / t for t in step_seconds["nanogpt"]]),
        "ratio": median_interval(ratios),
    }


def _in_fresh_process(shapes: tuple[str, ...]) -> dict[str, dict]:
    command = [sys.executable, "-m", "benchmarks.bench_training", "--worker", "--seconds", str(SECONDS_PER_SHAPE), *shapes]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"training benchmark worker failed:\n{done.stderr}")
    return {row["shape"]: row for row in json.loads(done.stdout)}


def run() -> list[dict]:
    """Each shape measured in ``PROCESSES`` fresh processes, one after another,
    the shapes' order swapped from one process to the next."""
    runs = [_in_fresh_process(SHAPES if i % 2 == 0 else SHAPES[::-1]) for i in range(PROCESSES)]
    rows = []
    for name in SHAPES:
        measured = [run_[name] for run_ in runs]
        row = {key: value for key, value in measured[0].items() if key not in ("zoo", "nanogpt", "ratio")}
        row.update(
            processes=[m["ratio"] for m in measured],  # each process's median pair ratio and its 95% interval
            pairs=sum(m["ratio"]["n"] for m in measured),
            zoo=spread([m["zoo"] for m in measured]),
            nanogpt=spread([m["nanogpt"] for m in measured]),
            ratio=spread([m["ratio"]["median"] for m in measured]),
        )
        rows.append(row)
    return rows


def _worker(shapes: list[str], seconds: float) -> list[dict]:
    torch.set_num_threads(THREADS)
    return [measure(name, seconds) for name in shapes]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help="measure the shapes named in this process and print JSON")
    parser.add_argument("--seconds", type=float, default=SECONDS_PER_SHAPE)
    parser.add_argument("shapes", nargs="*", default=list(SHAPES))
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(_worker(args.shapes, args.seconds)))
    else:
        for row in run():
            print(row)
