"""Training throughput on gpt-char-mini's shape: the zoo's GPT against the reference.

Tokens per second of forward + backward + AdamW step, batch 12 x context 64,
random tokens (throughput does not depend on the text). The two models are
timed in alternating rounds so that drift in the machine's speed hits both.
"""

from __future__ import annotations

import time

import torch

from benchmarks.common import median, zoo_network
from benchmarks.reference_gpt import ReferenceGPT

STEPS_PER_ROUND, ROUNDS, WARMUP = 50, 5, 10


def _stepper(model, batch, context, vocab):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(0)
    model.train()

    def step():
        idx = torch.randint(0, vocab, (batch, context + 1), generator=generator)
        _, loss = model(idx[:, :-1], idx[:, 1:])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def run() -> dict:
    zoo_model, config = zoo_network("gpt-char-mini")
    batch, context, vocab = 12, config["context_length"], config["vocab_size"]
    reference = ReferenceGPT(vocab, context, config["d_model"], config["n_layer"], config["n_head"])
    steppers = {"zoo": _stepper(zoo_model, batch, context, vocab), "reference": _stepper(reference, batch, context, vocab)}
    for step in steppers.values():
        for _ in range(WARMUP):
            step()
    rates = {name: [] for name in steppers}
    for _ in range(ROUNDS):
        for name, step in steppers.items():
            started = time.perf_counter()
            for _ in range(STEPS_PER_ROUND):
                step()
            rates[name].append(STEPS_PER_ROUND * batch * context / (time.perf_counter() - started))
    zoo_rate, reference_rate = median(rates["zoo"]), median(rates["reference"])
    return {
        "zoo_tokens_per_second": zoo_rate,
        "reference_tokens_per_second": reference_rate,
        "ratio": zoo_rate / reference_rate,
        "zoo_parameters": sum(p.numel() for p in zoo_model.parameters()),
        "reference_parameters": sum(p.numel() for p in reference.parameters()),
    }


if __name__ == "__main__":
    print(run())
