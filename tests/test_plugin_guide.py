"""docs/plugins.md must document every hook, with its current signature and docstring;
every core name it uses imports from the one surface, zoo_core.kit."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import re

import pytest

from zoo_core.plugin_api import hookspecs

from .conftest import ROOT

GUIDE = ROOT / "docs" / "plugins.md"
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


def _is_module(dotted: str) -> bool:
    try:
        return importlib.util.find_spec(dotted) is not None
    except ModuleNotFoundError:  # its parent is a module, not a package: this is a name in it
        return False


def _names_the_guide_uses() -> set[tuple[str, str]]:
    """(home, name) of every core name docs/plugins.md imports or spells out:
    ``from zoo_core.x import A, B`` in its code and `zoo_core.x.y.Name` in its text."""
    guide = GUIDE.read_text(encoding="utf-8")
    found = {
        (home, name.strip())
        for home, names in re.findall(r"^\s*from (zoo_core[\w.]*) import ([\w, ]+)$", guide, flags=re.MULTILINE)
        for name in names.split(",")
    }
    for dotted in re.findall(r"(?<![\w.])zoo_core(?:\.\w+)+", guide):
        home, _, name = dotted.rpartition(".")
        if home.startswith("zoo_core.kit.testing") or home == "zoo_core.kit":
            continue  # the kit's own tests, reached through the kit
        if not _is_module(dotted) or name == "hookspecs":  # a module is a path, not a name
            found.add((home, name))
    return found


def test_every_core_name_the_guide_uses_imports_from_the_kit():
    import zoo_core.kit as kit

    used = _names_the_guide_uses()
    assert {("zoo_core", "hookimpl"), ("zoo_core.plugin_api.protocols", "Block"), ("zoo_core.kit", "testing")} <= used
    for home, name in sorted(used):
        assert name in kit.__all__, f"docs/plugins.md uses {home}.{name}, which zoo_core.kit does not export"
        defined = getattr(importlib.import_module(home), name, None) or importlib.import_module(f"{home}.{name}")
        assert getattr(kit, name) is defined, f"zoo_core.kit.{name} is not {home}.{name}"
