"""zoo-gru's own tests: the recurrent contract through the zoo's kit, and the shipped variant.

They run against the installed plugin when there is one, and against this source
folder otherwise (``pythonpath = ["."]`` in pyproject.toml).
"""

from __future__ import annotations

import pytest
import torch

import zoo_gru
from zoo_core.loading.api import load
from zoo_core.inference.sampling import sample_tokens
from zoo_core.kit import testing
from zoo_core.plugin_api.manager import PluginInfo, PluginSet
from zoo_gru.gru import GRULanguageModel

NAME = "gru-char"


@pytest.fixture(scope="module")
def plugins() -> PluginSet:
    """Every installed plugin, with this one added if it is not installed."""
    plugin_set = PluginSet()
    plugin_set.load_entry_points()
    if "gru" not in plugin_set.plugins:
        plugin_set.add_plugin(zoo_gru, PluginInfo("gru", "zoo-gru", zoo_gru.__version__, builtin=False))
    return plugin_set


def _tiny() -> GRULanguageModel:
    return GRULanguageModel(vocab_size=48, context_length=8, d_model=16, hidden=24, n_layer=2)


def test_the_architecture_keeps_the_unbounded_contract():
    model = _tiny().eval()
    testing.assert_conforms("models", model)
    testing.assert_causal(model)
    testing.assert_chunked_step_matches_whole(model)
    testing.assert_state_does_not_grow(model)
    testing.assert_samples_past_window_in_constant_work(model)
    testing.assert_checkpoint_round_trip(_tiny)
    testing.assert_deterministic(_tiny)


def test_an_unknown_config_key_is_named(plugins):
    with pytest.raises(ValueError, match="unknown config keys for 'gru': n_head"):
        plugins.components["models"].create("gru", {"vocab_size": 4, "context_length": 4, "d_model": 4,
                                                    "hidden": 4, "n_head": 2}, plugins.components)


def test_zoo_check_plugin_passes(plugins):
    results = testing.check_plugin("gru", plugins=plugins)
    assert [r for r in results if not r.passed] == []
    checks = {(r.subject, r.check) for r in results}
    assert (f"variant '{NAME}'", "step() in chunks, state carried, equals one call") in checks
    assert (f"variant '{NAME}'", "samples past its training window, one token per step") in checks


def test_the_shipped_variant_samples_2000_tokens_one_position_at_a_time(plugins):
    model = load(NAME, plugins)
    network = model.network
    assert network.context_kind == "unbounded" and network.context_length == 64
    fed: list[int] = []
    states: set[tuple[int, ...]] = set()
    step = network.step

    def counted(idx, state=None):
        fed.append(idx.shape[1])
        logits, state = step(idx, state)
        states.add(tuple(state.shape))
        return logits, state

    network.step = counted
    try:
        prompt = torch.tensor([model.tokenizer.encode("ROMEO:\n")])
        out = sample_tokens(network, prompt, 2000, generator=torch.Generator().manual_seed(1))
    finally:
        del network.step
    assert out.shape[1] == 7 + 2000  # 31 windows' worth past the end of the prompt
    assert sum(fed) == 7 + 2000 - 1 and fed[1:] == [1] * 1999  # the prompt once, then one token per step
    assert states == {(1, 1, 128)}  # the same state, however far the text has gone
    text = model.tokenizer.decode(out[0].tolist())
    assert text.count("\n") > 20  # the shape of a play: speeches, line by line
