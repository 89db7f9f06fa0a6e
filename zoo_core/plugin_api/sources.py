"""Which installed plugin provides each component a card names.

A card names its components by registered name (``architecture``,
``tokenizer.kind``, ``config.positions``, ``config.block``, ``recipe.kind``,
``adapter.kind``); the plugin set knows which plugin registered each name and
which distribution (and version) that plugin came from. `zoo train` and
`zoo import` record the answer in the card's ``components`` so that a variant
says what code built it, and `zoo show` prints it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .manager import PluginSet

if TYPE_CHECKING:
    from ..catalogue.cards import ModelCard

# role in the card -> the component family its name is registered in
ROLE_FAMILIES = {
    "model": "models",
    "tokenizer": "tokenizers",
    "positions": "positions",
    "block": "blocks",
    "trainer": "trainers",
    "adapter": "adapters",
}


def named_components(card: dict[str, Any]) -> dict[str, str]:
    """The component names a card gives, by role, read from its index entry
    (``Variant.index``, ``ModelCard.index_entry()``): `zoo list` asks without pydantic.
    A setting that is not a name (the puzzle's ``positions = true``) names none."""
    config = card["config"] or {}
    adapter = card.get("adapter")
    names = {
        "model": card["architecture"],
        "tokenizer": card["tokenizer"]["kind"],
        "positions": config.get("positions"),
        "block": config.get("block"),
        "trainer": (card.get("recipe") or {}).get("kind"),  # an imported card has no recipe, and no trainer
        "adapter": adapter["kind"] if adapter is not None else None,
    }
    return {role: name for role, name in names.items() if isinstance(name, str) and name}


def component_sources(card: ModelCard, plugins: PluginSet) -> dict[str, dict[str, str]]:
    """For each role the card names a component in: ``{name, plugin,
    distribution, version}`` of the plugin that registers it now. Roles whose
    name is unknown, or claimed by two plugins, are left out: such a card cannot
    be built, and guessing a provider would record something untrue."""
    return providers(card.index_entry(), plugins)


def providers(card: dict[str, Any], plugins: PluginSet) -> dict[str, dict[str, str]]:
    """`component_sources` of a card's index entry (``Variant.index``): `zoo show` asks without pydantic."""
    sources = {}
    for role, name in named_components(card).items():
        components = plugins.components[ROLE_FAMILIES[role]]
        if components.problem(name) is not None:
            continue
        plugin = components.plugin_of(name)
        info = plugins.plugins.get(plugin)
        if info is None:  # registered outside the entry points (a test's plugin object)
            continue
        sources[role] = {"name": name, "plugin": plugin, "distribution": info.distribution, "version": info.version}
    return sources


def missing_component_problem(
    card: dict[str, Any],
    plugins: PluginSet,
    roles: tuple[str, ...] | None = None,
    conflicts: bool = True,
    only_recorded: bool = False,
) -> str | None:
    """Why ``card`` (an index entry, as `named_components` reads) cannot be built
    now, naming what to install: for a component no installed plugin registers,
    the distribution the card records it came from (`zoo train` records
    ``components``), so a variant left behind by an uninstalled plugin says
    which package to reinstall. None when every named
    component (of ``roles``, default all) is registered once, or (``conflicts``
    False) when none is missing, two plugins claiming one being left to the
    factory's own message; ``only_recorded``: only a missing component whose
    distribution the card records, the rest being left to the factory too."""
    recorded = card.get("components") or {}
    for role, name in named_components(card).items():
        if roles is not None and role not in roles:
            continue
        problem = plugins.components[ROLE_FAMILIES[role]].problem(name)
        if problem is None or (not conflicts and not problem.startswith("no ")):
            continue
        source = recorded.get(role)
        if problem.startswith("no ") and source and source.get("name") == name:
            distribution = source["distribution"]
            return (
                f"variant '{card['name']}' needs {ROLE_FAMILIES[role][:-1]} '{name}' from plugin '{source['plugin']}' "
                f"(distribution {distribution} {source['version']}), which is not installed: "
                f"`pip install {distribution}` brings it back (or `zoo remove {card['name']}` if it is yours)"
            )
        if not only_recorded:
            return problem
    return None
