"""Finding a variant, and whether it could be built, from names alone.

This is the cold-start front's part of loading: `zoo list`, `show`, `search`
and completion read a variant's ``index`` (plain data from the card cache),
never its pydantic ``card``, and import neither torch nor pydantic. Building
and loading (``zoo_core.loading.api``) import them at their top.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..catalogue.layers import build_catalogue
from ..catalogue.registry import Catalogue, Variant
from ..errors import ZooError
from ..plugin_api.manager import PluginSet, get_plugins
from ..plugin_api.sources import ROLE_FAMILIES, missing_component_problem

if TYPE_CHECKING:
    from ..catalogue.cards import ModelCard


def catalogue(plugins: PluginSet | None = None) -> Catalogue:
    """Every variant of every registry file, layer by layer (see ``zoo_core.catalogue.layers``)."""
    return build_catalogue(plugins)


def unbuildable_reason(variant: Variant, plugins: PluginSet | None = None) -> str | None:
    """Why the variant cannot be built now (a component it names is missing or
    claimed twice), from names alone: `zoo list` stays free of torch."""
    plugins = plugins or get_plugins()
    # Building needs every component the card names but its trainer.
    return missing_component_problem(variant.index, plugins, BUILDING_ROLES)


# The components a card names that building its network needs (all but its trainer).
BUILDING_ROLES = tuple(role for role in ROLE_FAMILIES if role != "trainer")


def require_components(variant: Variant, plugins: PluginSet) -> None:
    """Refuse, naming the distribution to reinstall, a variant a component of which is not installed."""
    problem = missing_component_problem(variant.index, plugins, BUILDING_ROLES, conflicts=False, only_recorded=True)
    if problem is not None:
        raise ZooError(problem)


def list_variants(pattern: str | None = None) -> list[ModelCard]:
    """Cards of the variants whose names match ``pattern`` (shell wildcards)."""
    return [variant.card for variant in catalogue().match(pattern)]


def get_variant(name: str) -> Variant:
    return catalogue().get(name)
