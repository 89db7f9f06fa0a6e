"""Training throughput: the zoo's own architectures against nanoGPT's model.py.

Tokens per second of forward + backward + optimizer step (+ gradient clipping
where the recipe clips), each side with its own optimizer settings: the zoo
through `zoo_core.training.make_optimizer` (fused AdamW) on the network the
plugin manager builds from the shipped card; nanoGPT through its own
`configure_optimizers(..., device_type="cpu")`, which on CPU does not fuse.
nanoGPT's model is built at the card's shape (layers, heads, width, context,
vocabulary, batch) with bias=False, as its shakespeare_char config. Batches are
nanoGPT's `get_batch`: random windows of a random token stream. The sides run
in alternating rounds, so drift in the machine's speed hits both.
"""

from __future__ import annotations

import torch

import zoo_core
from benchmarks.common import interleaved_rates, nanogpt, nanogpt_model, nanogpt_optimizer, spread, zoo_network
from zoo_core.training import make_optimizer

SHAPES = ("gpt-char-mini", "transformer-6b-sin")
ROUNDS, WARMUP, SECONDS_PER_ROUND = 5, 3, 1.5
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


def measure(name: str) -> dict:
    module, reference_label = nanogpt()
    card = zoo_core.get_variant(name).card
    recipe, context, vocab = card.recipe, card.context_length, card.tokenizer.vocab_size
    data = torch.randint(0, vocab, (200_000,), generator=torch.Generator().manual_seed(0))
    zoo, config = zoo_network(name)
    reference = nanogpt_model(module, vocab, context, config["d_model"], config["n_layer"], config["n_head"])
    torch.manual_seed(0)
    steppers = {
        "zoo": _stepper(zoo, make_optimizer(zoo, recipe), data, context, recipe.batch_size, recipe.grad_clip),
        "nanogpt": _stepper(reference, nanogpt_optimizer(reference, recipe.weight_decay, recipe.learning_rate, (recipe.beta1, recipe.beta2)),
                            data, context, recipe.batch_size, recipe.grad_clip),
    }
    rates = interleaved_rates(steppers, ROUNDS, WARMUP, SECONDS_PER_ROUND, recipe.batch_size * context)
    ratios = [z / n for z, n in zip(rates["zoo"], rates["nanogpt"])]  # per round: both sides saw the same load
    return {
        "shape": name,
        "reference": reference_label,
        "batch": recipe.batch_size,
        "context": context,
        "zoo_parameters": sum(p.numel() for p in zoo.parameters()),
        "nanogpt_parameters": sum(p.numel() for p in reference.parameters()),
        "zoo_parameter_tensors": len(list(zoo.parameters())),
        "nanogpt_parameter_tensors": len(list(reference.parameters())),
        "zoo": spread(rates["zoo"]),
        "nanogpt": spread(rates["nanogpt"]),
        "ratio": spread(ratios),
    }


def run() -> list[dict]:
    before = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    try:
        return [measure(name) for name in SHAPES]
    finally:
        torch.set_num_threads(before)


if __name__ == "__main__":
    for row in run():
        print(row)
