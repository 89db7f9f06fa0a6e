"""The text a variant's recipe names, found through the plugins' and the user's
datasets and checked against the card: what scoring, training and inspection read.
It sits in loading, not in the corpus, because it asks the plugin registry (above
the corpus) for the datasets and the catalogue (resolve_inside) for a recipe's path."""

from __future__ import annotations

from pathlib import Path

from ..catalogue.paths import resolve_inside
from ..corpus.datasets import Datasets, ResolvedText, read_dataset, read_text_file, resolve_named_or_path
from ..errors import ZooError
from ..plugin_api.manager import get_plugins


def resolve_recipe_text(
    recipe,
    registry_file: Path,
    datasets: Datasets,
    override: Path | str | None = None,
    allow_outside: bool = False,
) -> ResolvedText:
    """The text a card's recipe was trained on, checked against its recorded sha256;
    ``override`` (``--data NAME|PATH``) replaces it unchecked
    against the card, since the user chose other text on purpose. A path in the
    recipe stays inside the registry's folder unless the card opted out
    (``allow_outside``, see zoo_core.catalogue.paths)."""
    if override is not None:
        return resolve_named_or_path(override, datasets)
    if recipe.data in datasets:
        resolved = read_dataset(datasets.get(recipe.data))
    else:
        path = resolve_inside(Path(registry_file).parent, recipe.data, what="recipe.data", allow_outside=allow_outside)
        if not path.exists() and "/" not in recipe.data and not recipe.data.endswith(".txt"):
            datasets.get(recipe.data)  # a name nobody registers: say so, listing the known ones
        resolved = read_text_file(path)
    expected = getattr(recipe, "data_sha256", None)
    if expected and expected != resolved.sha256:
        raise ZooError(
            f"{resolved.path}: sha256 {resolved.sha256[:16]}… is not that of the text the card was trained on "
            f"({expected[:16]}…); pass --data to score on other text deliberately"
        )
    return resolved


def variant_text(variant, override: Path | str | None = None) -> ResolvedText:
    """The text ``variant``'s recipe names (checked), or ``override``; for weights
    trained elsewhere (no recipe), the text they are scored on (``card.evaluation_data``)."""
    if variant.card.recipe is None:
        return resolve_named_or_path(
            override if override is not None else variant.card.evaluation_data, get_plugins().datasets
        )
    return resolve_recipe_text(
        variant.card.recipe,
        variant.source,
        get_plugins().datasets,
        override,
        allow_outside=variant.card.allow_external_paths,
    )
