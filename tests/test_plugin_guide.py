"""docs/plugins.md must document every hook, with its current signature and docstring."""

from __future__ import annotations

import inspect
import re

import pytest

from zoo_core.plugin_api import hookspecs

from .conftest import ROOT

HOOKS = {name: function for name, function in vars(hookspecs).items() if hasattr(function, "zoo_spec")}


def _words(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def test_the_hookspecs_module_is_what_the_guide_is_checked_against():
    # If pluggy's marker attribute changed, HOOKS would be empty and the test below vacuous.
    assert set(HOOKS) >= {"register_tokenizers", "register_positions", "register_blocks", "register_models", "register_variants"}


@pytest.mark.parametrize("name", sorted(HOOKS))
def test_every_hook_is_in_the_guide_with_its_signature_and_docstring(name):
    guide = (ROOT / "docs" / "plugins.md").read_text(encoding="utf-8")
    function = HOOKS[name]
    signature = f"{name}{inspect.signature(function)}"
    assert f"### `{signature}`" in guide, f"docs/plugins.md has no reference entry '### `{signature}`'"
    assert _words(inspect.getdoc(function)) in _words(guide), (
        f"docs/plugins.md does not carry the current docstring of {name}; copy it from zoo_core/plugin_api/hookspecs.py"
    )
