"""The puzzle's "training": its weights are set by hand, slot by slot.

Registered as the trainer ``hand-built``, so `zoo train puzzle-disobeys
--publish` writes the shipped checkpoint through the same path as every
trained variant (and reproduces its sha256 byte for byte).
"""

from __future__ import annotations

import torch

from zoo_core.errors import ZooError
from zoo_core.training import TrainingJob, TrainingResult

from .model import PuzzleTransformer, hand_set_state_dict
from .report import evaluate_network
from .tokenizer import PuzzleTokenizer


class HandBuiltTrainer:
    """Sets seed 003's weights, then scores every well-formed sentence."""

    uses_corpus = False  # no text, steps or seed: the weights come from the slot layout

    def run(self, network: torch.nn.Module, job: TrainingJob) -> TrainingResult:
        if not isinstance(network, PuzzleTransformer):  # the slot layout is this architecture's alone
            raise ZooError(
                f"the hand-built trainer sets a PuzzleTransformer's weights, not a {type(network).__name__}'s"
            )
        config = job.card.config
        weights = hand_set_state_dict(config.get("positions", True), config.get("max_tokens", 6))
        with torch.no_grad():
            network.load_state_dict(weights, strict=True)
        network.eval()
        report = evaluate_network(network, PuzzleTokenizer())
        return TrainingResult(steps=0, metrics={"accuracy": report["accuracy"]})
