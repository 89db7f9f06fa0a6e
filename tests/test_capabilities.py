"""A model's capabilities (zoo_core.plugin_api.protocols.CAPABILITIES): the core asks
``implements`` before it uses one, a model without one is treated as it always was,
and the authors' kit reports a capability a model has only part of, in one line."""

from __future__ import annotations

import re
import types

import pytest
import torch
from torch import nn

from zoo_core import hookimpl
from zoo_core.errors import ZooError
from zoo_core.inference.sampling import sample_tokens
from zoo_core.inference.settings import SamplingSettings
from zoo_core.inspection.roles import task_ablation, verify_roles
from zoo_core.inspection.stream import read_logits
from zoo_core.kit import testing
from zoo_core.loading.api import load
from zoo_core.plugin_api.manager import PluginInfo, PluginSet
from zoo_core.plugin_api.protocols import (
    CAPABILITIES,
    CachedDecoding,
    Inspectable,
    RowBatching,
    UnboundedContext,
    capability_problem,
    implements,
    members,
)
from zoo_core.web.batching import Batcher
from zoo_core.web.generation import is_task_model

from .conftest import ROOT
from .recurrent_models import TinyGRU


class Plain(nn.Module):
    """A language model and nothing more: no capability at all."""

    def __init__(self, vocab_size=48, context_length=8, d_model=16, **_):
        super().__init__()
        self.context_length = context_length
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, idx, targets=None):
        return self.head(self.embedding(idx).cumsum(dim=1)), None

    def attention_maps(self, idx):
        return []


class WrongAsk(Plain):
    """Answers questions, but ask takes the prompt alone."""

    def ask(self, prompt):
        return "yes"


class HalfCache(Plain):
    """A cache maker without ``supports_kv_cache``, the attribute that switches cached decoding on."""

    def make_cache(self):
        return types.SimpleNamespace(length=0)


class CacheWithoutMaker(Plain):
    supports_kv_cache = True


class BatchWithoutCache(Plain):
    def make_row_batch(self, max_rows):
        return None


class HeadlessNorm(Plain):
    """A final norm and no lm_head: the logit lens could not read the stream through it."""

    def __init__(self, **config):
        super().__init__(**config)
        self.final_norm = nn.LayerNorm(16)


def _names(network) -> list[str]:
    return [capability.__name__ for capability in CAPABILITIES if implements(network, capability)]


def test_each_built_in_architecture_offers_what_the_core_relies_on():
    transformer = testing.tiny_transformer_builder()()
    assert _names(transformer) == [
        "CachedDecoding", "RowBatching", "Inspectable", "CappedLogits", "RoutedExperts"]
    assert _names(TinyGRU()) == ["UnboundedContext"]
    assert _names(load("bigram").network) == []
    assert _names(load("puzzle-disobeys").network) == [
        "TaskModel", "SelfEvaluating", "Traceable", "NamedHeads", "NamedSlots", "RoleVerifying", "AnswerAblating"]
    for network in (transformer, TinyGRU(), Plain()):
        assert testing.assert_capabilities_complete(network) == _names(network)


def test_a_switch_set_off_declines_a_capability_it_would_otherwise_have():
    transformer = testing.tiny_transformer_builder()()
    transformer.supports_kv_cache = False  # what the transformer says when a block takes no cache
    assert not implements(transformer, CachedDecoding) and not implements(transformer, RowBatching)
    assert capability_problem(transformer, CachedDecoding) is None
    assert capability_problem(transformer, RowBatching) is None

    class Windowed(TinyGRU):
        context_kind = "bounded"

    assert not implements(Windowed(), UnboundedContext) and capability_problem(Windowed(), UnboundedContext) is None


def test_a_model_without_a_capability_is_treated_as_before():
    plain = Plain().eval()
    calls: list[tuple[int, bool]] = []
    plain.register_forward_pre_hook(lambda module, args, kwargs: calls.append((args[0].shape[1], "cache" in kwargs)),
                                    with_kwargs=True)
    prompt = torch.tensor([[1, 2, 3]])
    tokens = sample_tokens(plain, prompt, SamplingSettings(max_new_tokens=10), torch.Generator().manual_seed(0))
    assert tokens.shape == (1, 13)
    assert calls == [(min(3 + i, 8), False) for i in range(10)]  # uncached: the whole window every step

    model = types.SimpleNamespace(network=plain, name="plain", tokenizer=None)
    assert not is_task_model(model)
    with pytest.raises(ZooError, match="^'plain' has no final_norm and lm_head to read its residual stream through$"):
        read_logits(model, torch.zeros(1, 16))
    with pytest.raises(ZooError, match="^'plain' states no head roles to verify"):
        verify_roles(model)
    assert task_ablation(model, None) is None
    batcher = Batcher(model, 2)
    assert not batcher.cached and batcher.batch is None and not batcher.carried


def test_a_model_with_part_of_a_capability_is_treated_as_without_it():
    half = HalfCache().eval()
    calls: list[bool] = []
    half.register_forward_pre_hook(lambda module, args, kwargs: calls.append("cache" in kwargs), with_kwargs=True)
    sample_tokens(half, torch.tensor([[1, 2]]), SamplingSettings(max_new_tokens=4), torch.Generator().manual_seed(0))
    assert calls == [False] * 4
    assert not implements(HeadlessNorm(), Inspectable)


@pytest.mark.parametrize(
    ("network", "problem"),
    [
        (WrongAsk(), "a WrongAsk, which has ask(prompt) where the zoo calls ask(tokenizer, prompt, explain=False, "
                     "png=None): too many positional arguments (zoo_core.plugin_api.protocols.TaskModel)"),
        (HalfCache(), "a HalfCache, which has make_cache() but lacks supports_kv_cache "
                      "(zoo_core.plugin_api.protocols.CachedDecoding)"),
        (CacheWithoutMaker(), "a CacheWithoutMaker, which has supports_kv_cache but lacks make_cache() "
                              "(zoo_core.plugin_api.protocols.CachedDecoding)"),
        (BatchWithoutCache(), "a BatchWithoutCache, which has make_row_batch() but lacks make_cache(), "
                              "supports_kv_cache (zoo_core.plugin_api.protocols.RowBatching)"),
        (HeadlessNorm(), "a HeadlessNorm, which has final_norm but lacks lm_head "
                         "(zoo_core.plugin_api.protocols.Inspectable)"),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, nn.Module) else "",
)
def test_the_kit_reports_a_half_implemented_capability_in_one_line(network, problem):
    with pytest.raises(AssertionError) as failed:
        testing.assert_capabilities_complete(network)
    assert str(failed.value) == f"model: {problem}"


def test_a_forward_without_cache_is_a_half_cached_decoding():
    class NoCacheParameter(HalfCache):
        supports_kv_cache = True

    assert capability_problem(NoCacheParameter(), CachedDecoding) == (
        "a NoCacheParameter, which has forward(idx, targets=None) where the zoo calls "
        "__call__(idx, targets=None, cache=None): got an unexpected keyword argument 'cache' "
        "(zoo_core.plugin_api.protocols.CachedDecoding)"
    )


def test_check_plugin_fails_the_protocol_line_of_a_half_capability_and_names_those_offered():
    class Plugin:
        @hookimpl
        def register_models(register):
            register("wrong-ask", lambda config, components: WrongAsk(**config))
            register("half-cache", lambda config, components: HalfCache(**config))
            register("plain", lambda config, components: Plain(**config))

    plugins = PluginSet()
    plugins.load_entry_points()
    plugins.add_plugin(Plugin, PluginInfo("halves", "zoo-halves", "0", False))
    # Loading does not refuse it: the core treats it as lacking the capability.
    assert isinstance(plugins.components["models"].create("half-cache", dict(testing.TINY), plugins.components), HalfCache)
    results = testing.check_plugin("halves", deep=False, plugins=plugins)
    lines = {r.subject.split(" with ")[0]: r for r in results if r.check == "builds and satisfies the protocol"}
    failed = {subject: r.detail for subject, r in lines.items() if r.status == "FAIL"}
    assert set(failed) == {"model 'wrong-ask'", "model 'half-cache'"}
    assert all("\n" not in detail for detail in failed.values())
    assert failed["model 'half-cache'"].endswith("lacks supports_kv_cache (zoo_core.plugin_api.protocols.CachedDecoding)")
    assert lines["model 'plain'"].status == "ok"
    assert lines["model 'plain'"].detail == "no capability beyond LanguageModel"
    transformer = testing.check_model_protocols("transformer", testing.tiny_transformer_builder())
    assert (transformer.status, transformer.detail) == ("ok", "offers CachedDecoding, RowBatching, Inspectable, CappedLogits, RoutedExperts")


def test_the_core_asks_the_protocols_never_hasattr_on_a_network():
    duck_typed = re.compile(r"(hasattr|getattr)\((model\.)?network\b|(hasattr|getattr)\(model, \"(ask|supports_kv_cache)")
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / "zoo_core").rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if duck_typed.search(line)
    ]
    assert found == []


def test_the_guide_names_each_capability_and_its_members():
    guide = (ROOT / "docs" / "plugins.md").read_text(encoding="utf-8")
    section = guide.split("## Capabilities: what a model may offer beyond the protocol")[1].split("\n## ")[0]
    rows = {line.split("|")[1].strip(" `").split("`")[0]: line for line in section.splitlines() if line.startswith("| `")}
    assert list(rows) == ["LanguageModel", *(capability.__name__ for capability in CAPABILITIES)]
    for capability in CAPABILITIES:
        methods, attributes = members(capability)
        named = [f"`{name}(" for name in methods if name != "__call__"] + [f"`{name}" for name in attributes]
        if capability is RowBatching:  # its inherited members are named as "those of CachedDecoding"
            named = ["`make_row_batch("]
        assert all(name in rows[capability.__name__] for name in named), (capability.__name__, named)
