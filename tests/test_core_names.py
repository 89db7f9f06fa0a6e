"""The core names no plugin's tensors or settings (docs/architecture.md).

Beside the import contracts (zoo_core never imports zoo_plugins), the core must
not be written against the built-in transformer through strings either: its
tensor names (``blocks.0.feed_forward.up.weight``), its config settings
(``n_kv_head``) and its architecture names used as a capability test
(``card.architecture == "transformer"``). What the core needs of an
architecture it asks through a declared hook or capability. tests/core_names.py
says what counts as naming; this module derives the forbidden names from the
built-in plugins themselves, so a new built-in setting or tensor is covered
the day it is added.
"""

from __future__ import annotations

import re

import pytest

from zoo_core.errors import ZooError
from zoo_core.kit import testing
from zoo_core.plugin_api import hookspecs, protocols
from zoo_core.plugin_api.manager import COMPONENT_KINDS, get_plugins
from zoo_core.plugin_api.sources import ROLE_FAMILIES

from .conftest import ROOT
from .core_names import problems, problems_in

CORE = ROOT / "zoo_core"

# TEMPORARY, for the lead to empty when issue 52's other branches land: the files
# two other engineers are rewriting onto family records and the typed transformer
# config (the converters, the card model, its reference and the limits). Nothing
# else is exempt.
EXEMPT_UNTIL_INTEGRATION: tuple[str, ...] = ()

# Names the core uses by right although a built-in plugin uses them too, each with why.
# Everything else allowed is computed below from the plugin API's own declarations.
CORE_WORDS = {
    "layers": "the generic word for a network's layers (zoo list's column, the inspectors' per-layer reports); "
    "the transformer's config key of that name is its own",
    "weight": "torch's own parameter name (nn.Linear, nn.Embedding, the norms), not the plugin's",
    "bias": "torch's parameter name, and PositionEncoding.bias in plugin_api/protocols.py",
    "table": "TOML's word for a section (a card's config table) and rich's Table",
    "attention": "the hook-point convention docs/plugins.md asks every block to follow "
    "(blocks.{i}.attention.heads, read by head ablation) and Traceable's trace()['attention']",
}


def transformer_settings() -> set[str]:
    """The built-in transformer's config settings: the fields of its typed config
    (zoo_plugins/models/settings.py), model-wide and per layer."""
    from zoo_plugins.models.settings import TransformerConfig

    return set(TransformerConfig.model_fields)


def transformer_tensor_names() -> set[str]:
    """The module-path parts of a tiny built transformer's tensors (``feed_forward``,
    ``qkv``, ...), with the optional parts (query/key norms, gated MLPs) switched on."""
    names: set[str] = set()
    for extra in ({}, {"qk_norm": "rmsnorm", "mlp": "swiglu", "n_kv_head": 1, "residual": "parallel"}):
        try:
            network = testing.tiny_transformer_builder(**extra)()
        except (ZooError, TypeError, ValueError):  # a setting renamed by the typed config: the plain build still counts
            continue
        names |= {part for key in network.state_dict() for part in key.split(".") if not part.isdigit()}
    assert names, "no tiny transformer could be built to read its tensor names from"
    return names


def transformer_architectures() -> set[str]:
    """The names the built-in plugins register architectures under whose networks are
    the built-in transformer (the core must not test a card's architecture against them)."""
    from zoo_plugins.models.transformer import TransformerLanguageModel

    plugins = get_plugins()
    models = plugins.components["models"]
    found = set()
    for name in models.names():
        if not plugins.plugins[models.plugin_of(name)].builtin:
            continue
        try:
            network = models.create(name, {**testing.TINY, "n_layer": 1}, plugins.components)
        except (ZooError, TypeError, ValueError):
            continue  # an architecture of other settings (the bigram, the puzzle): not the transformer
        if isinstance(network, TransformerLanguageModel):
            found.add(name)
    assert "transformer" in found
    return found


def core_vocabulary() -> set[str]:
    """Names the plugin API itself defines: the factory keywords its hooks document,
    every protocol's and capability's members, the component kinds, and the card's
    roles that name a registered component (``config.positions``, ``config.block``)."""
    keywords = set()
    for function in vars(hookspecs).values():
        for call in re.findall(r"factory\(([^)]*)\)", getattr(function, "__doc__", None) or ""):
            keywords |= set(re.findall(r"([A-Za-z_]\w*)(?:=\.\.\.)?", call))
    members = set()
    for protocol in {kind[0] for kind in protocols.PROTOCOLS.values()} | set(protocols.CAPABILITIES):
        methods, attributes = protocols.members(protocol)
        members |= set(methods) | set(attributes)
    return keywords | members | set(COMPONENT_KINDS) | set(ROLE_FAMILIES) | set(CORE_WORDS)


@pytest.fixture(scope="module")
def forbidden() -> set[str]:
    return (transformer_settings() | transformer_tensor_names() | transformer_architectures()) - core_vocabulary()


def test_the_forbidden_set_holds_the_transformers_names_and_not_the_plugin_apis(forbidden):
    assert {"n_layer", "n_kv_head", "head_size", "feed_forward", "norm1", "qkv", "rope_base", "transformer"} <= forbidden
    assert not {"d_model", "n_head", "d_ff", "context_length", "vocab_size", "lm_head", "final_norm"} & forbidden


def test_the_core_names_no_plugins_tensors_or_settings(forbidden):
    files = [
        path
        for path in CORE.rglob("*.py")
        if not str(path.relative_to(ROOT)).startswith(EXEMPT_UNTIL_INTEGRATION)
    ]
    assert len(files) > 100
    found = problems_in(files, forbidden, ROOT)
    assert found == [], (
        "the core names the built-in transformer's tensors or settings; ask the plugin through a declared "
        "hook or capability instead (docs/architecture.md):\n" + "\n".join(found)
    )


def test_the_exemptions_name_files_that_exist():
    for exempt in EXEMPT_UNTIL_INTEGRATION:
        assert (ROOT / exempt).exists(), f"{exempt} is exempt but gone: take it off the list"


PLANTED = '''
"""A docstring may say blocks.0.feed_forward.up.weight and n_kv_head."""


def read(state, config, network, card):
    # so may a comment: feed_forward
    up = state["blocks.0.feed_forward.up.weight"]
    heads = config.get("n_kv_head", 1)
    first = f"blocks.{0}.attention.qkv"
    return network.blocks[0].norm1(up), heads, first, card.architecture == "transformer", dict(n_layer=2)
'''


def test_the_checker_fails_on_names_planted_in_code_and_not_on_prose(forbidden):
    found = problems(PLANTED, forbidden, "planted.py")
    assert found == [
        "planted.py:7: 'feed_forward' (string)",
        "planted.py:7: 'up' (string)",
        "planted.py:8: 'n_kv_head' (string)",
        "planted.py:9: 'qkv' (string)",
        "planted.py:10: 'n_layer' (keyword)",
        "planted.py:10: 'norm1' (attribute)",
        "planted.py:10: 'transformer' (string)",
    ]
    # A message in words is prose, but an identifier in it is still a use.
    assert problems('raise ValueError("the up projection of the attention table")', forbidden) == []
    assert problems('raise ValueError("set n_kv_head in the card")', forbidden) == ["<source>:1: 'n_kv_head' (string)"]


def test_the_checker_finds_a_planted_name_in_a_core_file(forbidden, tmp_path):
    core = tmp_path / "zoo_core"
    core.mkdir()
    (core / "fine.py").write_text('WIDTH = "d_model"\n')
    (core / "planted.py").write_text('def up(state):\n    return state["blocks.0.feed_forward.up.weight"]\n')
    assert problems_in(core.rglob("*.py"), forbidden, tmp_path) == [
        "zoo_core/planted.py:2: 'feed_forward' (string)",
        "zoo_core/planted.py:2: 'up' (string)",
    ]
