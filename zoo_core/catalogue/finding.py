"""Finding variants: `zoo list` filters and sorts, `zoo search` looks through text.

Card facts only (`Variant.facts`, plain data): no torch and no pydantic, so both
stay as fast as listing.
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Iterable

from ..errors import ZooError
from .registry import Variant

SORT_KEYS = ("name", "validation_loss", "parameters")
_WILDCARDS = set("*?[")


def name_matches(name: str, pattern: str) -> bool:
    """Shell wildcards when the pattern has any (``transformer-*``), else a
    case-insensitive substring (``rope`` finds ``gpt-char-mini-rope``)."""
    if _WILDCARDS & set(pattern):
        return fnmatch.fnmatchcase(name, pattern)
    return pattern.lower() in name.lower()


def dataset_of(variant: Variant) -> str | None:
    """The data a variant was trained on, as its recipe records it (None: hand-built)."""
    recipe = variant.facts.recipe
    return recipe.data if recipe.kind == "trained" else None


def _dataset_matches(variant: Variant, wanted: str) -> bool:
    data = dataset_of(variant)
    if data is None:
        return False
    path = PurePath(data)
    return wanted in (data, path.name, path.stem)


@dataclass
class VariantFilter:
    """What `zoo list` narrows by; every given criterion must hold."""

    pattern: str | None = None
    tags: list[str] = field(default_factory=list)
    architecture: str | None = None
    tokenizer: str | None = None
    dataset: str | None = None

    def accepts(self, variant: Variant) -> bool:
        card = variant.facts
        return (
            (not self.pattern or name_matches(card.name, self.pattern))
            and all(tag in card.tags for tag in self.tags)
            and (self.architecture is None or card.architecture == self.architecture)
            and (self.tokenizer is None or card.tokenizer.kind == self.tokenizer)
            and (self.dataset is None or _dataset_matches(variant, self.dataset))
        )


def sort_variants(variants: list[Variant], key: str | None) -> list[Variant]:
    """Catalogue order, or by ``key``; variants without the value go last."""
    if key is None:
        return variants
    if key not in SORT_KEYS:
        raise ZooError(f"cannot sort by '{key}'; choose one of {', '.join(SORT_KEYS)}")
    if key == "name":
        return sorted(variants, key=lambda v: v.name)

    def value(variant: Variant) -> float:
        facts = variant.facts
        number = facts.metrics.validation_loss if key == "validation_loss" else facts.parameters
        return math.inf if number is None else number

    return sorted(variants, key=value)


def find_variants(variants: Iterable[Variant], criteria: VariantFilter, sort: str | None = None) -> list[Variant]:
    return sort_variants([v for v in variants if criteria.accepts(v)], sort)


def search_variants(variants: Iterable[Variant], text: str) -> list[Variant]:
    """Variants whose name, description or tags hold every word of ``text``
    (case-insensitive); those holding the words as one phrase first, then those
    that match in the name."""
    words = text.lower().split()
    if not words:
        raise ZooError("the search text is empty; give a word to look for, e.g. `zoo search rope`")
    found: list[tuple[bool, int, int, Variant]] = []
    for variant in variants:
        card = variant.facts
        haystack = " ".join([card.name, card.description, *card.tags, card.architecture]).lower()
        if all(word in haystack for word in words):
            phrase = " ".join(words) in haystack
            in_name = sum(word in card.name.lower() for word in words)
            found.append((not phrase, -in_name, len(found), variant))
    return [variant for *_, variant in sorted(found, key=lambda item: item[:3])]
