"""zoo_core.kit.testing, the authors' kit, catches real faults; built-in names stay built-in.

Faulty components are registered the way a plugin registers them (through a
PluginSet's hooks) and built into the registered transformer.
"""

from __future__ import annotations

import pytest
from torch import nn

from zoo_core import hookimpl
from zoo_core.errors import ZooError
from zoo_core.kit import testing
from zoo_core.loading.api import catalogue, load_variant, unbuildable_reason
from zoo_core.plugin_api.components import PositionEncodingBase
from zoo_core.plugin_api.manager import PluginInfo, PluginSet


class LeakyPositions(PositionEncodingBase):
    """Adds the mean of the whole sequence to every position: the future leaks in."""

    def __init__(self, **kwargs):
        super().__init__()

    def embed(self, x, positions):
        return x + x.mean(dim=1, keepdim=True)


class CacheIgnoringBlock(nn.Module):
    """Accepts `cache` but never hands it to attention: decoding sees one token only."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x, positions, encoding, need_weights=False, cache=None):
        return self.inner(x, positions, encoding, need_weights)


def _plugins_with(**hooks) -> PluginSet:
    plugins = PluginSet()
    plugins.load_entry_points()
    plugin = type("Plugin", (), {name: staticmethod(hookimpl(function)) for name, function in hooks.items()})
    plugins.add_plugin(plugin, PluginInfo("faulty", "zoo-faulty", "0", False))
    return plugins


def test_the_kit_passes_the_built_in_parts():
    build = testing.tiny_transformer_builder(positions="rope", block="post-norm")
    testing.assert_causal(build())
    testing.assert_kv_cache_matches_uncached(build())
    testing.assert_checkpoint_round_trip(build)
    testing.assert_deterministic(build)


def test_a_position_encoding_that_sees_the_future_fails_causality():
    plugins = _plugins_with(register_positions=lambda register: register("leaky", lambda **kw: LeakyPositions(**kw)))
    with pytest.raises(AssertionError, match="changed the logits of earlier positions .* attention sees the future"):
        testing.assert_causal(testing.tiny_transformer_builder(plugins, positions="leaky")())


def test_a_block_that_ignores_the_cache_fails_the_cache_check():
    def register_blocks(register):
        register("forgetful", lambda **kw: CacheIgnoringBlock(plugins_ref[0].components["blocks"].create("pre-norm", **kw)))

    plugins_ref = []
    plugins = _plugins_with(register_blocks=register_blocks)
    plugins_ref.append(plugins)
    with pytest.raises(AssertionError, match="cached sampling diverges from uncached at new token 2 "):
        testing.assert_kv_cache_matches_uncached(testing.tiny_transformer_builder(plugins, block="forgetful")())
    results = testing.check_plugin("faulty", plugins=plugins)
    failed = {(r.subject, r.check) for r in results if not r.passed}
    assert failed == {("block 'forgetful' in a tiny transformer", "KV cache equals uncached past the window, and is used")}


def test_a_factory_returning_the_wrong_object_is_one_line_naming_plugin_component_and_what_is_missing():
    plugins = _plugins_with(register_positions=lambda register: register("linear", lambda **kw: nn.Linear(2, 2)))
    with pytest.raises(ZooError) as error:
        testing.tiny_transformer_builder(plugins, positions="linear")()
    assert str(error.value) == (
        "plugin 'faulty': position 'linear': the factory returned a Linear, "
        "which lacks embed(), rotate(), bias() (zoo_core.plugin_api.protocols.PositionEncoding)"
    )
    results = testing.check_plugin("faulty", deep=False, plugins=plugins)
    assert [r.status for r in results] == ["ok", "FAIL"]


def test_a_third_party_claim_on_a_built_in_name_is_refused_and_every_built_in_variant_still_builds():
    plugins = _plugins_with(register_positions=lambda register: register("learned", lambda **kw: LeakyPositions()))
    positions = plugins.components["positions"]
    assert positions.plugin_of("learned") == "positions" and positions.conflicts() == {}
    assert plugins.plugins["faulty"].errors == [
        "position 'learned' belongs to the built-in plugin 'positions'; this plugin's 'learned' was refused (choose another name)"
    ]
    assert "faulty" not in str(plugins.plugins["positions"].errors)
    assert plugins.problems() == [f"plugin 'faulty': {plugins.plugins['faulty'].errors[0]}"]
    variants = list(catalogue(plugins))
    assert all(unbuildable_reason(v, plugins) is None for v in variants)
    learned = [v for v in variants if v.card.config.get("positions") == "learned"]
    assert len(learned) >= 10
    model = load_variant(catalogue(plugins).get("gpt-char-mini"), plugins)
    assert isinstance(model.network.positions, nn.Module) and not isinstance(model.network.positions, LeakyPositions)


def test_zoo_list_marks_a_variant_whose_parts_are_missing_with_the_reason():
    plugins = PluginSet()
    plugins.load_entry_points()
    variant = catalogue(plugins).get("gpt-char-mini")
    card = variant.card.model_copy(update={"config": {**variant.card.config, "positions": "xpos"}})
    broken = type(variant)(card=card, source=variant.source, plugin=variant.plugin)
    assert unbuildable_reason(broken, plugins) == "no position named 'xpos' is registered"


def test_check_plugin_on_a_built_in_passes_and_an_unknown_plugin_is_one_line(zoo):
    done = zoo("check-plugin", "trainers")
    assert done.code == 0, done.out + done.err
    assert "ok   trainer 'trained': deterministic, and resumes exactly" in done.out
    missing = zoo("check-plugin", "nope")
    assert missing.code == 1 and missing.err.startswith("zoo: error: no plugin named 'nope' is loaded")


class AsciiOnly:
    """Drops what is not ASCII: every non-English text comes back changed."""

    vocab_size = 128

    def encode(self, text):
        return [ord(c) for c in text if ord(c) < 128]

    def decode(self, ids):
        return "".join(map(chr, ids))


class AsciiOrSaySo(AsciiOnly):
    """The same vocabulary, honest about it."""

    def encode(self, text):
        if any(ord(c) >= 128 for c in text):
            raise ZooError("this tokenizer spells ASCII only")
        return super().encode(text)


class Counter(nn.Module):
    """An architecture no card uses: the kit builds it from its tiny config."""

    def __init__(self, vocab_size, context_length, d_model, **_):
        super().__init__()
        self.context_length = context_length
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, idx, targets=None):
        logits = self.head(self.embedding(idx).cumsum(dim=1))
        return logits, None

    def attention_maps(self, idx):
        return []


def test_check_plugin_gives_every_registered_part_a_line_and_a_silent_mangler_fails():
    plugins = _plugins_with(
        register_tokenizers=lambda register: [
            register("ascii-silent", lambda spec, path: AsciiOnly()),
            register("ascii-honest", lambda spec, path: AsciiOrSaySo()),
            register("needs-a-file", lambda spec, path: open(path)),  # no card names its file
        ],
        register_models=lambda register: register("counter", lambda config, components: Counter(**config)),
    )
    results = testing.check_plugin("faulty", plugins=plugins)
    lines = {(r.subject, r.status): r for r in results}
    silent = lines[("tokenizer 'ascii-silent'", "FAIL")]
    assert "accented Latin text" in silent.detail and "must raise ZooError" in silent.detail
    honest = next(r for r in results if r.subject == "tokenizer 'ascii-honest'" and "round-trips" in r.check)
    assert honest.status == "ok" and "refuses accented Latin" in honest.detail and "ASCII only" in honest.detail
    assert "no variant uses it, and it needs one to build" in lines[("tokenizer 'needs-a-file'", "skip")].detail
    counter = [r for r in results if r.subject.startswith("model 'counter'")]
    assert {r.check for r in counter if r.status == "ok"} >= {"builds and satisfies the protocol", "causality"}
    # Every name the plugin registered has at least one line.
    assert {r.subject.split(" with ")[0] for r in results} >= {
        "tokenizer 'ascii-silent'", "tokenizer 'ascii-honest'", "tokenizer 'needs-a-file'", "model 'counter'"}


def test_check_plugin_fails_a_registered_name_the_kit_has_no_check_for():
    from zoo_core.kit.testing import CheckResult, _unchecked

    registered = {"tokenizers": ["seen"], "widgets": ["gadget"], "variant files": ["registry.toml"]}
    missing = _unchecked(registered, [CheckResult("tokenizer 'seen'", "round trip", "ok")])
    assert [(r.subject, r.status) for r in missing] == [("widgets 'gadget'", "FAIL")]
