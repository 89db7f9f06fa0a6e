"""Every shipped variant, evaluated afresh, scores what its card says.

A card's metrics are measured by `zoo train` (or `zoo eval`), never claimed;
this re-measures them from the checkpoint: the loss on the same fixed windows,
or the task score of a task model. A checkpoint swapped for other weights with
a matching card, or an evaluation that changed, shows up here. Slow (it
evaluates every variant), so it runs with `-m slow`.
"""

from __future__ import annotations

import pytest
import torch

import zoo_core.loading.api
from zoo_core.evaluation.scoring import evaluate_language_model


def _published():
    return [variant.name for variant in zoo_core.loading.api.catalogue() if variant.card.checkpoint.sha256 is not None]


@pytest.mark.slow
@pytest.mark.parametrize("name", _published())
def test_a_fresh_evaluation_matches_the_card(name):
    torch.set_num_threads(1)  # the order of summation of the run that wrote the card
    model = zoo_core.load(name)
    metrics = model.card.metrics
    if hasattr(model.network, "evaluate"):  # task models: scored by accuracy
        report = model.network.evaluate(model.tokenizer)
        assert report["accuracy"] == pytest.approx(metrics.accuracy, abs=1e-9), report
        return
    assert metrics.validation_loss is not None and metrics.train_loss is not None, f"{name}: the card records no losses"
    report = evaluate_language_model(model)
    # The card rounds to 4 decimals; allow that and the last bits of another thread count.
    assert report["validation_loss"] == pytest.approx(metrics.validation_loss, abs=2e-4)
    assert report["train_loss"] == pytest.approx(metrics.train_loss, abs=2e-4)


def test_every_published_variant_has_metrics_to_compare():
    """The slow test above has something to check for every published variant."""
    for variant in zoo_core.loading.api.catalogue():
        if variant.card.checkpoint.sha256 is not None:
            metrics = variant.card.metrics
            assert metrics.validation_loss is not None or metrics.accuracy is not None, variant.name
