"""zoo-lion's own tests: the optimizer's rule, the trainer through the zoo's kit, the variant.

They run against the installed plugin when there is one, and against this source
folder otherwise (``pythonpath = ["."]`` in pyproject.toml).
"""

from __future__ import annotations

import pytest
import torch

import zoo_lion
from zoo_core.loading.api import catalogue
from zoo_core.kit import testing
from zoo_core.plugin_api.manager import PluginInfo, PluginSet
from zoo_lion.lion import Lion
from zoo_lion.trainer import LionTrainer


@pytest.fixture(scope="module")
def plugins() -> PluginSet:
    plugin_set = PluginSet()
    plugin_set.load_entry_points()
    if "lion" not in plugin_set.plugins:
        plugin_set.add_plugin(zoo_lion, PluginInfo("lion", "zoo-lion", zoo_lion.__version__, builtin=False))
    return plugin_set


def test_a_lion_step_moves_every_weight_by_the_learning_rate_against_the_gradient_sign():
    weight = torch.nn.Parameter(torch.tensor([1.0, -2.0, 0.5]))
    optimizer = Lion([weight], lr=0.1, betas=(0.9, 0.99), weight_decay=0.0)
    weight.grad = torch.tensor([3.0, -0.001, 0.0])
    optimizer.step()
    assert torch.allclose(weight.detach(), torch.tensor([0.9, -1.9, 0.5]))
    # The running average moved a (1 - beta2) share towards the gradient.
    assert torch.allclose(optimizer.state[weight]["exp_avg"], torch.tensor([0.03, -0.00001, 0.0]))


def test_decoupled_weight_decay_shrinks_before_the_step():
    weight = torch.nn.Parameter(torch.tensor([2.0]))
    optimizer = Lion([weight], lr=0.1, weight_decay=0.5)
    weight.grad = torch.tensor([1.0])
    optimizer.step()
    assert torch.allclose(weight.detach(), torch.tensor([2.0 * (1 - 0.05) - 0.1]))


def test_the_trainer_is_registered_and_passes_the_kit(plugins):
    assert plugins.plugins["lion"].errors == []
    trainer = plugins.components["trainers"].create("lion")
    testing.assert_conforms("trainers", trainer)
    assert isinstance(trainer, LionTrainer) and trainer.uses_corpus
    testing.assert_trainer_resumes_exactly(trainer, testing.tiny_transformer_builder(plugins))


def test_zoo_check_plugin_passes(plugins):
    results = testing.check_plugin("lion", plugins=plugins)
    assert [r for r in results if not r.passed] == []
    assert {r.subject for r in results} >= {"trainer 'lion'", "variant 'lion-1b-learned-ctx8'"}


def test_the_variant_names_the_lion_trainer(plugins):
    card = catalogue(plugins).get("lion-1b-learned-ctx8").card
    assert card.recipe.kind == "lion" and card.license == "MIT"
