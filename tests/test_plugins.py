"""Plugin discovery and isolation: entry points, broken hooks, name conflicts."""

from __future__ import annotations

import importlib.metadata
import json
import types

import pytest

from zoo_core import hookimpl
from zoo_core.errors import ZooError
from zoo_core.plugin_api.manager import PluginInfo, PluginSet, get_plugins


def test_builtins_come_through_the_zoo_entry_point_group():
    names = {ep.name for ep in importlib.metadata.entry_points(group="zoo") if ep.dist.metadata["Name"] == "zoo-lm"}
    assert {"bpe", "positions", "blocks", "models", "catalogue"} <= names
    plugins = get_plugins()
    assert {"learned", "none", "sinusoidal", "rope"} <= set(plugins.components["positions"].names())
    assert plugins.components["blocks"].plugin_of("pre-norm") == "blocks"


def test_zoo_plugins_reports_each_plugin(zoo):
    result = zoo("plugins", "--json")
    report = {p["name"]: p for p in json.loads(result.out)["plugins"]}
    assert report["positions"]["registered"]["positions"] == ["learned", "sinusoidal", "none", "rope"]
    assert report["positions"]["version"] == "0.1.0" and report["positions"]["builtin"]
    assert all(not p["errors"] for p in report.values())


def test_each_distribution_s_metadata_is_parsed_once(monkeypatch):
    # Reading dist.metadata parses the whole METADATA file every time; one
    # distribution brings several entry points.
    parsed = []

    def counting(real):
        def metadata(self):
            parsed.append(self)
            return real.fget(self)

        return property(metadata)

    # The distributions' own class: once a library such as MLflow has imported the
    # importlib_metadata backport, its finder answers importlib.metadata with its own.
    for kind in {type(ep.dist) for ep in importlib.metadata.entry_points(group="zoo")}:
        owner = next(cls for cls in kind.__mro__ if "metadata" in vars(cls))
        monkeypatch.setattr(owner, "metadata", counting(vars(owner)["metadata"]))
    plugins = PluginSet()
    plugins.load_entry_points()
    during = list(parsed)
    zoo_entry_points = importlib.metadata.entry_points(group="zoo")
    assert len(zoo_entry_points) > len({ep.dist.name for ep in zoo_entry_points}), "the test needs a distribution with two plugins"
    assert during and len(during) == len({id(dist) for dist in during}), "a distribution's METADATA was parsed more than once"
    assert plugins.plugins["positions"].distribution == "zoo-lm" and plugins.plugins["positions"].version == "0.1.0"


def _plugin(name, **hooks):
    module = types.SimpleNamespace(**{hook: hookimpl(function) for hook, function in hooks.items()})
    module.__name__ = name
    return module


def test_a_raising_hook_is_reported_and_the_rest_keeps_working():
    plugins = PluginSet()

    def register_positions(register):
        register("fine", lambda **kw: None)

    def register_blocks(register):
        raise RuntimeError("boom")

    plugins.add_plugin(_plugin("half-broken", register_positions=register_positions, register_blocks=register_blocks), PluginInfo("half-broken", "x", "1", False))
    assert plugins.components["positions"].names() == ["fine"]
    assert plugins.plugins["half-broken"].errors == ["hook register_blocks raised RuntimeError: boom"]


def test_two_plugins_claiming_one_name_name_both():
    plugins = PluginSet()
    for name in ("first", "second"):
        plugins.add_plugin(_plugin(name, register_positions=lambda register: register("rope", lambda **kw: None)), PluginInfo(name, name, "1", False))
    with pytest.raises(ZooError, match="position 'rope' is registered by more than one plugin \\('first' and 'second'\\)"):
        plugins.components["positions"].factory("rope")
    assert plugins.conflict_messages() == ["position 'rope' is registered by 'first' and 'second'"]


def test_a_factory_that_cannot_be_imported_is_a_clear_error():
    plugins = PluginSet()
    plugins.add_plugin(_plugin("lazy", register_blocks=lambda register: register("ghost", "no_such_module:Block")), PluginInfo("lazy", "x", "1", False))
    with pytest.raises(ZooError, match="plugin 'lazy': cannot import 'no_such_module:Block'"):
        plugins.components["blocks"].factory("ghost")


def test_unknown_component_lists_the_known_ones():
    with pytest.raises(ZooError, match="no position named 'xpos' is registered \\(known: learned, none, rope, sinusoidal"):
        get_plugins().components["positions"].factory("xpos")
